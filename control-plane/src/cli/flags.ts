// The arguments of the control plane's CLIs: each command's own flags
// (`--flag value` or `--flag=value`) and the rest, which are the control
// plane's configuration flags (--data-dir, --database-url...) for loadConfig.
import { ConfigError, loadConfig, type Config } from '../config/config.ts';

/**
 * Splits `argv` into the values of the command's own flags (keyed by the name
 * `own` maps each flag to) and the other arguments, in order. An own flag
 * without a value is handed to `fail`.
 */
export function splitFlags(argv: readonly string[], own: ReadonlyMap<string, string>, fail: (message: string) => never): { input: Record<string, string>; configFlags: string[] } {
  const input: Record<string, string> = {};
  const configFlags: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const [flag, inline] = eq === -1 ? [arg, undefined] : [arg.slice(0, eq), arg.slice(eq + 1)];
    const key = own.get(flag);
    if (!key) {
      configFlags.push(arg);
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined) fail(`${flag} needs a value`);
    input[key] = value;
  }
  return { input, configFlags };
}

/** The control plane's configuration from the environment and the remaining flags; a bad one is handed to `fail`. */
export function cliConfig(configFlags: string[], fail: (message: string) => never): Config {
  try {
    return loadConfig(process.env, configFlags);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    fail(`invalid configuration: ${error.message}`);
  }
}
