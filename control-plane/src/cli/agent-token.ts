// `npm run agent-token -- create --name edge-1 [--description ...] [--expires-at 2027-01-01T00:00:00Z]`
// issues an edge agent token and prints its value once;
// `npm run agent-token -- list [--status active|revoked]` lists them (never a value);
// `npm run agent-token -- revoke <id>` revokes one (running control planes close its streams);
// `npm run agent-token -- rotate <id>` revokes one and issues its replacement (printed once).
// Other flags are the control plane's (--data-dir, --database-url...). Like
// admin:create, it runs inside the control plane while one holds the embedded
// database (through its command socket); otherwise it opens the database itself.
// The argument schema alone, not through the capability's index.ts, so a bad argument is refused before the capability loads (0.4 s, not 1.3 s).
import { agentTokenArgs } from '../edge-channel/agent-token-record.ts';
import { cliConfig, splitFlags } from './flags.ts';

const USAGE = 'usage: agent-token create --name NAME [--description TEXT] [--expires-at ISO-DATE-TIME] | list [--status active|revoked] | revoke ID | rotate ID';

function fail(message: string): never {
  console.error(`agent-token: ${message}`);
  console.error(USAGE);
  process.exit(1);
}

/** Each action's own flags; any other flag is the control plane's (an unknown one is refused by loadConfig). */
const flagsOf: Record<string, Map<string, string>> = {
  create: new Map([['--name', 'name'], ['--description', 'description'], ['--expires-at', 'expires_at']]),
  list: new Map([['--status', 'status']]),
  revoke: new Map(),
  rotate: new Map(),
};
const [action, ...rest] = process.argv.slice(2);
if (!action || !Object.hasOwn(flagsOf, action)) fail(action ? `unknown action ${JSON.stringify(action)}` : 'an action is required');
// revoke and rotate take the token's id first; every action then takes its own flags and the control plane's.
const takesId = action === 'revoke' || action === 'rotate';
const id = takesId && rest[0] !== undefined && !rest[0].startsWith('-') ? rest.shift() : undefined;
const { input, configFlags } = splitFlags(rest, flagsOf[action]!, fail);
input.action = action;
if (id !== undefined) input.id = id;
const parsed = agentTokenArgs.safeParse(input);
if (!parsed.success) {
  const issue = parsed.error.issues[0]!;
  const field = String(issue.path[0] ?? '');
  if (field === 'id') fail(input.id === undefined ? `${action} needs the token's id` : `the id: ${issue.message}`);
  fail(input[field] === undefined && field === 'name' ? '--name is required' : `--${field.replace(/_/g, '-')}: ${issue.message}`);
}
const config = cliConfig(configFlags, fail);
// Loaded once the arguments are known to be good (the entities bring in every capability).
const [{ entities }, { runCommand }, { agentTokenCommand }, { sealedSigningKey }] = await Promise.all([
  import('../capabilities.ts'), import('../db/command-channel.ts'), import('../edge-channel/index.ts'), import('../auth/token-service.ts'),
]);
// A token is stored as its hash under the deployment's pepper: with another secrets key it could never be verified.
process.exit(await runCommand(agentTokenCommand, parsed.data, config, { entities, deploymentSecret: sealedSigningKey }));
