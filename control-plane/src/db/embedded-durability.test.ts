// Durability of the embedded database across a crash of its owner: the real
// control-plane process is killed with SIGKILL while writes are in flight.
// PGlite runs Postgres with fsync off (-F), so an acknowledged commit has
// reached the kernel (NODEFS writes through) but not necessarily the disk: it
// survives a process crash, which is what this checks, not a power loss.
import t from 'tap';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { embeddedEnv, startControlPlaneProcess } from '../../../test/support/processes.ts';

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

t.test('kill -9 of the control plane during writes: the restart works and every acknowledged write is there', async (t) => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-durable-'));
  t.teardown(() => fs.rm(dataDir, { recursive: true, force: true }));
  const env = embeddedEnv(dataDir, { RATE_LIMIT_IP_MULTIPLIER: '10000', RATE_LIMIT_PER_MINUTE: '0', LOG_LEVEL: 'warn' });
  const cp = await startControlPlaneProcess(t, { ...env, LOG_LEVEL: 'info' });

  const acknowledged: string[] = [];
  let killed = false;
  let sequence = 0;
  const worker = async () => {
    while (!killed) {
      const email = `writer-${sequence++}@example.com`;
      try {
        const res = await post(`${cp.url}/v1/auth/register`, { email, password: 'Durable-Write-1', accept_terms: true });
        if (res.status === 201) acknowledged.push(email);
        else throw new Error(`register answered ${res.status}`);
      } catch (error) {
        if (!killed) throw error;
      }
      if (acknowledged.length >= 12 && !killed) {
        // Writes from the other workers are still in flight.
        killed = true;
        cp.child.kill('SIGKILL');
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  t.match(await cp.exited, { signal: 'SIGKILL' });
  t.ok(acknowledged.length >= 12);

  const restarted = await startControlPlaneProcess(t, { ...env, LOG_LEVEL: 'info' });
  for (let i = 0; i < acknowledged.length; i += 4) {
    const batch = acknowledged.slice(i, i + 4);
    const statuses = await Promise.all(batch.map(async (email) => (await post(`${restarted.url}/v1/auth/login`, { email, password: 'Durable-Write-1' })).status));
    t.same(statuses, batch.map(() => 200), `acknowledged registrations are there: ${batch.join(', ')}`);
  }
  await restarted.stop();
});
