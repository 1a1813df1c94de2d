// `npm run admin:create -- --email you@example.com [--password ...] [--display-name ...] [--role superadmin|admin]`
// creates a superadmin (or grants a role to an existing account). Without
// --password a strong one is generated and printed once. Other flags are the
// control plane's (--data-dir, --database-url...). While the control plane runs
// on the embedded database, the command runs inside it (through its command
// socket); otherwise it opens the database itself.
import { createAdminArgs, createAdminCommand } from '../admin/create-admin.ts';
import { entities } from '../capabilities.ts';
import { runCommand } from '../db/command-channel.ts';
import { cliConfig, splitFlags } from './flags.ts';

function fail(message: string): never {
  console.error(`admin:create: ${message}`);
  process.exit(1);
}

const own = new Map([['--email', 'email'], ['--password', 'password'], ['--display-name', 'display_name'], ['--role', 'role']]);
const { input, configFlags } = splitFlags(process.argv.slice(2), own, fail);
const parsed = createAdminArgs.safeParse(input);
if (!parsed.success) {
  const issue = parsed.error.issues[0]!;
  const flag = `--${String(issue.path[0] ?? 'email').replace(/_/g, '-')}`;
  fail(input[String(issue.path[0])] === undefined && flag === '--email' ? '--email with a valid address is required' : `${flag}: ${issue.message}`);
}
const config = cliConfig(configFlags, fail);
process.exit(await runCommand(createAdminCommand, parsed.data, config, { entities }));
