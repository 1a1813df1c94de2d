// Helpers every benchmark script shares: numeric flags, tool lookup, CPU pinning.
import { spawnSync } from 'node:child_process';

/** `--name 5` from the command line, or the default. */
export function numberFlag(name: string, fallback: number, argv = process.argv.slice(2)): number {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(argv[i + 1]);
}

/** `--name a,b,c` from the command line, or the default's list. */
export function listFlag(name: string, fallback: string, argv = process.argv.slice(2)): string[] {
  const i = argv.indexOf(`--${name}`);
  return (i === -1 ? fallback : argv[i + 1]!).split(',').filter(Boolean);
}

export function have(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
}

/** The command pinned to the given core(s) with taskset, when it is installed. */
export function pin(cores: number | string, cmd: string[]): string[] {
  return have('taskset') ? ['taskset', '-c', String(cores), ...cmd] : cmd;
}
