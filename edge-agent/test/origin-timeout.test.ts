// An origin's timeout_ms is when the viewer gets its 504, tried with a real
// agent process (CONFIG_FILE) and an origin that takes the request and never
// answers. undici's own header timer ticks every half second, so a 500 ms
// timeout answered after about a second (1,008 ms measured); the agent now
// waits for the head on a timer of its own. The bound is generous (300 ms
// over), not a tight threshold: what it rules out is a second tick or a retry.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { HOST, exitOf, snapshotFor, startAgentProcess, startOrigin } from './helpers.ts';

t.test('a silent origin is answered with 504 at its timeout_ms, not a timer tick or a retry later', async (t) => {
  // Answers /warm at once (the agent's first request pays its one-time start-up costs there); takes every other request and never answers.
  const origin = await startOrigin((req, res) => { if (req.url === '/warm') res.end('warm'); });
  t.teardown(() => origin.close());
  const dir = mkdtempSync(join(tmpdir(), 'edge-timeout-'));
  const file = join(dir, 'snapshot.json');
  writeFileSync(file, JSON.stringify(snapshotFor(origin.port, {
    origin: { timeout_ms: 500, max_retries: 2, retry_on: ['5xx', 'connect_failure'] },
  })));
  const agent = await startAgentProcess({ CONFIG_FILE: file, DATA_DIR: dir });
  t.teardown(async () => { agent.child.kill('SIGKILL'); await exitOf(agent.child); });

  t.equal((await (await request(`http://127.0.0.1:${agent.port}/warm`, { headers: { host: HOST } })).body.text()), 'warm');
  for (const path of ['/a', '/b', '/c']) {
    const timeoutMs = 500;
    const started = performance.now();
    const res = await request(`http://127.0.0.1:${agent.port}${path}`, { headers: { host: HOST } });
    await res.body.text();
    const elapsed = performance.now() - started;
    t.equal(res.statusCode, 504, `${path}: 504`);
    t.ok(elapsed >= timeoutMs - 5, `${path}: not before timeout_ms ${timeoutMs} (${Math.round(elapsed)} ms)`);
    t.ok(elapsed < timeoutMs + 300, `${path}: at timeout_ms ${timeoutMs}, not a timer tick later (${Math.round(elapsed)} ms)`);
  }
  t.equal(origin.requests.filter((r) => r.url === '/a').length, 1, 'a timeout is not retried');
});
