// `npm run admin:create -- --email you@example.com [--password ...] [--display-name ...] [--role superadmin|admin]`
// creates a superadmin (or grants a role to an existing account). Without
// --password a strong one is generated and printed once. Other flags are the
// control plane's (--data-dir, --database-url...). While the control plane runs
// on the embedded database, the command runs inside it (through its command
// socket); otherwise it opens the database itself.
import { createAdminArgs, createAdminCommand } from '../admin/create-admin.ts';
import { entities } from '../capabilities.ts';
import { ConfigError, loadConfig } from '../config/config.ts';
import { runCommand } from '../db/command-channel.ts';

function fail(message: string): never {
  console.error(`admin:create: ${message}`);
  process.exit(1);
}

const own = new Map([['--email', 'email'], ['--password', 'password'], ['--display-name', 'display_name'], ['--role', 'role']]);
const input: Record<string, string> = {};
const configFlags: string[] = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const [flag, inline] = argv[i]!.includes('=') ? [argv[i]!.slice(0, argv[i]!.indexOf('=')), argv[i]!.slice(argv[i]!.indexOf('=') + 1)] : [argv[i]!, undefined];
  const key = own.get(flag);
  if (!key) {
    configFlags.push(argv[i]!);
    continue;
  }
  const value = inline ?? argv[++i];
  if (value === undefined) fail(`${flag} needs a value`);
  input[key] = value;
}
const parsed = createAdminArgs.safeParse(input);
if (!parsed.success) {
  const issue = parsed.error.issues[0]!;
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
process.exit(await runCommand(createAdminCommand, parsed.data, config, { entities }));
