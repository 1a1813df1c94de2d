// Creates the first superadmin (or grants a role to an existing account):
//   npm run admin:create -- --email you@example.com [--password ...] [--display-name ...] [--role superadmin|admin]
// Without --password a strong one is generated and printed once.
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { User, defaultNotificationPreferences } from '../accounts/user.entity.ts';
import { normalizeEmail } from '../auth/auth-service.ts';
import { assignRole, syncRoleCatalog } from '../auth/permissions/permission-service.ts';
import { hashPassword, passwordSchema } from '../auth/primitives/password.ts';
import { emailField } from '../auth/schemas.ts';
import { ConfigError, loadConfig } from '../config/config.ts';
import { entities } from '../capabilities.ts';
import { openDatabase } from '../db/orm.ts';

function fail(message: string): never {
  console.error(`admin:create: ${message}`);
  process.exit(1);
}

const { values } = parseArgs({
  options: {
    email: { type: 'string' },
    password: { type: 'string' },
    'display-name': { type: 'string' },
    role: { type: 'string', default: 'superadmin' },
  },
  strict: true,
});

if (!values.email || !emailField().safeParse(values.email).success) fail('--email with a valid address is required');
if (!['superadmin', 'admin'].includes(values.role!)) fail('--role must be superadmin or admin');
const generated = values.password === undefined;
const password = values.password ?? `${randomBytes(18).toString('base64url')}aA1!`;
const policy = passwordSchema.safeParse(password);
if (!policy.success) fail(`--password: ${policy.error.issues.map((i) => i.message).join('; ')}`);

let config;
try {
  config = loadConfig(process.env, []);
} catch (error) {
  if (error instanceof ConfigError) fail(`invalid configuration: ${error.message}`);
  throw error;
}

const db = await openDatabase({ databaseUrl: config.DATABASE_URL, dataDir: config.dataDir, entities });
try {
  const em = db.orm.em.fork();
  await syncRoleCatalog(em);
  const email = normalizeEmail(values.email!);
  let user = await em.findOne(User, { email });
  const created = !user;
  if (user) {
    if (values.password !== undefined) user.password_hash = await hashPassword(password);
    console.log(`Account ${email} exists: granting ${values.role}${values.password !== undefined ? ' and setting the given password' : ''}.`);
  } else {
    user = em.create(User, {
      email,
      password_hash: await hashPassword(password),
      display_name: values['display-name'] ?? null,
      status: 'active',
      email_verified: true,
      terms_accepted_at: new Date(),
      notification_preferences: { ...defaultNotificationPreferences },
    } as never);
    console.log(`Created ${email}.`);
  }
  await em.flush();
  await assignRole(em, user.id, values.role!);
  await assignRole(em, user.id, 'subscriber');
  if (created && generated) console.log(`Generated password (shown once, store it safely): ${password}`);
  console.log(`Log in: POST ${config.publicUrl}/v1/auth/login with {"email": "${email}", "password": "..."}`);
} finally {
  await db.close();
}
