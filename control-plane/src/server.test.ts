// Process behaviour: graceful shutdown finishes in-flight requests and stops
// accepting; a bad configuration stops the process with one line naming the variable.
import { spawn } from 'node:child_process';
import t from 'tap';
import { z } from 'zod';
import { data, routesFor } from './http/route.ts';
import { startTestControlPlane } from '../../test/support/control-plane.ts';

const slow = routesFor()({
  method: 'get', path: '/v1/test/slow', summary: 'Answers after 400 ms', tags: ['test'], access: 'public',
  responses: { 200: data(z.object({ done: z.boolean() })) },
  async handler() {
    await new Promise((r) => setTimeout(r, 400));
    return { done: true };
  },
});

t.test('close() lets an in-flight request finish, then refuses new connections', async (t) => {
  const cp = await startTestControlPlane(t, { extraRoutes: [slow] });
  const inFlight = fetch(`${cp.url}/v1/test/slow`);
  await new Promise((r) => setTimeout(r, 100));
  const closing = cp.close();
  const response = await inFlight;
  t.equal(response.status, 200, 'the in-flight request completed');
  t.same(await response.json(), { data: { done: true } });
  await closing;
  await t.rejects(fetch(`${cp.url}/healthz`), 'no longer accepting');
});

function run(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['control-plane/src/main.ts', ...args], { env: { ...process.env, GRPC_PORT: '0', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

t.test('a wrong setting stops the process with one line naming the variable', async (t) => {
  const bad = await run([], { PORT: 'eighty' });
  t.equal(bad.code, 1);
  t.match(bad.stderr.trim(), /^control-plane: invalid configuration: PORT: /);
  t.equal(bad.stderr.trim().split('\n').length, 1, 'one line');
  const badFlag = await run(['--redis-url', 'nope'], {});
  t.equal(badFlag.code, 1);
  t.match(badFlag.stderr, /REDIS_URL/);
});
