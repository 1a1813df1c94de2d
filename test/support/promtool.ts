// Prometheus's promtool (Debian package `prometheus`) for the checks of ops/:
// the configuration, the alert rules and their unit tests, and the processes'
// /metrics. Tests that need it skip without it, and fail under CI=true, where
// .ci/run installs it.
import { spawnSync } from 'node:child_process';

export const PROMTOOL_INSTALL_HINT = 'promtool is not installed: apt-get install --no-install-recommends prometheus (it provides promtool)';

export const promtoolInstalled = () => spawnSync('sh', ['-c', 'command -v promtool']).status === 0;

/** Runs promtool with the arguments (and stdin), at most 60 s; its exit status and output. */
export function promtool(args: string[], options: { cwd?: string; input?: string } = {}): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { cwd: options.cwd, input: options.input, encoding: 'utf8', timeout: 60_000 });
  return { status: run.status, output: `${run.stdout ?? ''}${run.stderr ?? ''}${run.error ? String(run.error) : ''}` };
}
