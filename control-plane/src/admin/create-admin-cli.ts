// Creates a superadmin (or grants a role to an existing account):
//   npm run admin:create -- --email you@example.com [--password ...] [--display-name ...] [--role superadmin|admin]
// Without --password a strong one is generated and printed once. Other flags
// are the control plane's (--data-dir, --database-url...). While the control
// plane runs on the embedded database, the command runs inside it (through its
// command socket); otherwise it opens the database itself.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { EntityManager } from '@mikro-orm/postgresql';
import { User, defaultNotificationPreferences } from '../accounts/user.entity.ts';
import { normalizeEmail } from '../auth/auth-service.ts';
import { assignRole, syncRoleCatalog } from '../auth/permissions/permission-service.ts';
import { hashPassword, passwordSchema } from '../auth/primitives/password.ts';
import { emailField } from '../auth/schemas.ts';
import { ConfigError, loadConfig } from '../config/config.ts';
import { defineCommand, runCommand } from '../db/command-channel.ts';
import type { Database } from '../db/orm.ts';

const args = z.strictObject({
  email: emailField(),
  /** Absent: generate one and print it. */
  password: passwordSchema.optional(),
  display_name: z.string().trim().min(1).max(100).optional(),
  role: z.enum(['superadmin', 'admin']).default('superadmin'),
});

export function generatePassword(): string {
  // 144 random bits, plus one character of each class the policy asks for.
  return `${randomBytes(18).toString('base64url')}aA1!`;
}

/** Creates the account (active, verified) or finds it; grants the role and `subscriber`. */
async function upsertAdmin(em: EntityManager, input: { email: string; password?: string; displayName?: string; role: string }): Promise<{ created: boolean; password: string }> {
  const email = normalizeEmail(input.email);
  const password = input.password ?? generatePassword();
  let user = await em.findOne(User, { email });
  const created = !user;
  if (user) {
    if (input.password !== undefined) user.password_hash = await hashPassword(password);
  } else {
    user = em.create(User, {
      email,
      password_hash: await hashPassword(password),
      display_name: input.displayName ?? null,
      status: 'active',
      email_verified: true,
      terms_accepted_at: new Date(),
      notification_preferences: { ...defaultNotificationPreferences },
    } as never);
  }
  await em.flush();
  await assignRole(em, user.id, input.role);
  await assignRole(em, user.id, 'subscriber');
  return { created, password };
}

export const createAdminCommand = defineCommand({
  name: 'admin:create',
  args,
  async run({ db, publicUrl, io }, input) {
    const em = db.orm.em.fork();
    await syncRoleCatalog(em);
    const email = normalizeEmail(input.email);
    const { created, password } = await upsertAdmin(em, { email, password: input.password, displayName: input.display_name, role: input.role });
    if (created) io.out(`Created ${email} (${input.role}).`);
    else io.out(`Account ${email} exists: granted ${input.role}${input.password !== undefined ? ' and set the given password' : ''}.`);
    if (created && input.password === undefined) io.out(`Generated password (shown once, store it safely): ${password}`);
    io.out(`Log in: POST ${publicUrl}/v1/auth/login with {"email": "${email}", "password": "..."}`);
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

if (import.meta.main) {
  const own = new Map([['--email', 'email'], ['--password', 'password'], ['--display-name', 'display_name'], ['--role', 'role']]);
  const input: Record<string, string> = {};
  const configFlags: string[] = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].includes('=') ? [argv[i].slice(0, argv[i].indexOf('=')), argv[i].slice(argv[i].indexOf('=') + 1)] : [argv[i], undefined];
    const key = own.get(flag);
    if (!key) {
      configFlags.push(argv[i]);
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined) fail(`${flag} needs a value`);
    input[key] = value;
  }
  const parsed = args.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const flag = `--${String(issue.path[0] ?? 'email').replace(/_/g, '-')}`;
    fail(input[String(issue.path[0])] === undefined && flag === '--email' ? '--email with a valid address is required' : `${flag}: ${issue.message}`);
  }
  let config;
  try {
    config = loadConfig(process.env, configFlags);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    fail(`invalid configuration: ${error.message}`);
  }
  process.exit(await runCommand(createAdminCommand, parsed.data, config));
}

function fail(message: string): never {
  console.error(`admin:create: ${message}`);
  process.exit(1);
}
