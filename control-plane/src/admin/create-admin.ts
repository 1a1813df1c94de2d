// The admin:create command (its CLI is control-plane/src/cli/admin-create.ts):
// creates a superadmin or admin, or grants the role to an existing account
// its owner holds, and creates the first superadmin of a fresh database.
import { randomInt } from 'node:crypto';
import { z } from 'zod';
import type { EntityManager } from '@mikro-orm/postgresql';
import { createAccount, ensurePrimaryProfile, User } from '../accounts/index.ts';
import { assignRole, emailField, hashPassword, normalizeEmail, ownedByItsOwner, passwordSchema, syncRoleCatalog } from '../auth/index.ts';
import { CommandError, defineCommand } from '../db/command-channel.ts';
import { connectedControlPlanes } from '../db/control-plane-presence.ts';
import type { Database } from '../db/orm.ts';

export const createAdminArgs = z.strictObject({
  email: emailField(),
  /** Absent: generate one and print it. */
  password: passwordSchema.optional(),
  display_name: z.string().trim().min(1).max(100).optional(),
  role: z.enum(['superadmin', 'admin']).default('superadmin'),
});

/** The classes the password policy asks for; the symbols need no quoting inside a shell's single quotes or JSON. */
const PASSWORD_CLASSES = ['ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz', '0123456789', '-_.~+=@#%'] as const;
const PASSWORD_ALPHABET = PASSWORD_CLASSES.join('');

/**
 * 24 characters drawn uniformly from 71 (about 147 bits), one of each class the policy asks for placed at a random
 * position: nothing about a generated password is fixed, not even where its digit or symbol stands.
 */
export function generatePassword(): string {
  const chars = PASSWORD_CLASSES.map((set) => set[randomInt(set.length)]!);
  while (chars.length < 24) chars.push(PASSWORD_ALPHABET[randomInt(PASSWORD_ALPHABET.length)]!);
  for (let i = chars.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [chars[i], chars[j]] = [chars[j]!, chars[i]!];
  }
  return chars.join('');
}

/**
 * Creates the account (active, verified, with its primary profile) or finds it; grants the role and `subscriber`.
 * An existing account whose owner has not confirmed the address or set a password (ownedByItsOwner) is refused (CommandError):
 * anyone can register an address and wait for it to be made an administrator (account pre-hijacking).
 */
async function upsertAdmin(em: EntityManager, input: { email: string; password?: string; displayName?: string; role: string }): Promise<{ created: boolean; password: string }> {
  const email = normalizeEmail(input.email);
  const password = input.password ?? generatePassword();
  let user = await em.findOne(User, { email });
  const created = !user;
  if (user) {
    if (!ownedByItsOwner(user)) {
      throw new CommandError(`${email} belongs to an account whose owner has not confirmed the address or set a password (anyone can register an address), `
        + 'so it is not given a role. Invite it as a CDN admin user instead (POST /v1/cdn/admin/users): the invitation reaches the owner, who sets the password.');
    }
    if (input.password !== undefined) user.password_hash = await hashPassword(password);
    user.updated_at = new Date(); // its roles change: the record's version (ETag) moves
  } else {
    user = await createAccount(em, {
      email, status: 'active', email_verified: true, password_confirmed: true, display_name: input.displayName, terms_accepted_at: new Date(),
    }, await hashPassword(password));
  }
  await em.flush();
  // Every account has its primary profile (an existing one already does).
  await ensurePrimaryProfile(em, user);
  await assignRole(em, user.id, input.role);
  await assignRole(em, user.id, 'subscriber');
  return { created, password };
}

export const createAdminCommand = defineCommand({
  name: 'admin:create',
  args: createAdminArgs,
  async run({ db, publicUrl, io }, input) {
    const em = db.orm.em.fork();
    await syncRoleCatalog(em);
    const email = normalizeEmail(input.email);
    const { created, password } = await upsertAdmin(em, { email, password: input.password, displayName: input.display_name, role: input.role });
    if (created) io.out(`Created ${email} (${input.role}).`);
    else io.out(`Account ${email} exists: granted ${input.role}${input.password !== undefined ? ' and set the given password' : ''}.`);
    if (created && input.password === undefined) io.out(`Generated password (shown once, store it safely): ${password}`);
    // The control planes connected to this database name their address; without one, this configuration's address.
    const running = await connectedControlPlanes(db);
    const [url = publicUrl, ...others] = running;
    const where = others.length ? ` (also served at ${others.join(', ')})`
      : !running.length && !db.embedded ? ' (no control plane is connected to this database now: the address this configuration gives it)' : '';
    io.out(`Log in: POST ${url}/v1/auth/login with {"email": "${email}", "password": "..."}${where}`);
  },
});

/**
 * On a database where nobody holds the superadmin role (a fresh data
 * directory), creates one with a generated password and returns the
 * credentials for the caller to show once; otherwise returns undefined. Runs
 * under an advisory lock, so replicas starting together create one account.
 */
export async function ensureFirstSuperadmin(db: Database, email: string): Promise<{ email: string; password: string } | undefined> {
  return db.orm.em.fork().transactional(async (em) => {
    await em.execute('select pg_advisory_xact_lock(727002)');
    const [{ n }] = await em.execute(`select count(*)::int as n from user_role where role_name = 'superadmin' and (expires_at is null or expires_at > now())`);
    if (n > 0) return undefined;
    const result = await upsertAdmin(em, { email, role: 'superadmin' });
    return { email: normalizeEmail(email), password: result.password };
  });
}
