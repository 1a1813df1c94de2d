// Waiting for a condition in tests (never a fixed sleep standing in for it).
import { setTimeout as sleep } from 'node:timers/promises';

/** Polls until the condition holds; fails naming it after timeoutMs (generous: the machine is shared). */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await sleep(5);
  }
}
