// The real agent process (node edge-agent/src/main.ts): SIGHUP re-reads
// --config-file (a bad file keeps the previous config serving), and SIGTERM lets
// an in-flight request complete before exiting with code 0.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { exitOf, startAgentProcess, startOrigin, snapshotFor, sleep, HOST } from './helpers.ts';

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await request(`http://127.0.0.1:${port}${path}`, { headers: { host: HOST } });
  return { status: res.statusCode, body: await res.body.text() };
}

t.test('SIGHUP reloads --config-file; a bad file keeps the previous configuration', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'no-store' });
    res.end(`v=${req.headers['x-config-version'] ?? 'none'}`);
  });
  const dir = mkdtempSync(join(tmpdir(), 'edge-main-test-'));
  const configFile = join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify(snapshotFor(origin.port, { version: 1, origin: { custom_headers: { 'X-Config-Version': '1' } } })));
  const { child, port, logs } = await startAgentProcess({ DATA_DIR: join(dir, 'data'), CONFIG_FILE: configFile });
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await origin.close();
    rmSync(dir, { recursive: true, force: true });
  });
  t.equal((await get(port, '/x')).body, 'v=1');

  writeFileSync(configFile, JSON.stringify(snapshotFor(origin.port, { version: 2, origin: { custom_headers: { 'X-Config-Version': '2' } } })));
  child.kill('SIGHUP');
  let body = '';
  for (let i = 0; i < 100 && body !== 'v=2'; i++) {
    await sleep(50);
    body = (await get(port, '/x')).body;
  }
  t.equal(body, 'v=2', 'the new file is served after SIGHUP');

  writeFileSync(configFile, '{ "version": 3, "endpoints": [ { "id": "broken" } ] }');
  child.kill('SIGHUP');
  for (let i = 0; i < 100 && !logs.some((l) => l.includes('reloading the config file failed')); i++) await sleep(50);
  t.ok(logs.some((l) => l.includes('reloading the config file failed')), 'the bad file is logged');
  t.equal((await get(port, '/x')).body, 'v=2', 'the previous configuration keeps serving');
  t.equal(child.exitCode, null, 'still running');

  child.kill('SIGTERM');
  t.equal(await exitOf(child), 0);
});

t.test('SIGTERM: an in-flight request completes, then the process exits with code 0', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/slow') {
      setTimeout(() => {
        res.writeHead(200, { 'cache-control': 'no-store' });
        res.end('finished');
      }, 800);
      return;
    }
    res.end('ok');
  });
  const dir = mkdtempSync(join(tmpdir(), 'edge-main-test-'));
  const configFile = join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify(snapshotFor(origin.port)));
  const { child, port } = await startAgentProcess({ DATA_DIR: join(dir, 'data'), CONFIG_FILE: configFile, SHUTDOWN_TIMEOUT_MS: '5000' });
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await origin.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const inFlight = get(port, '/slow');
  await origin.received('/slow'); // the request is at the origin now
  const t0 = Date.now();
  child.kill('SIGTERM');
  const res = await inFlight;
  t.equal(res.status, 200, 'the in-flight request got its response');
  t.equal(res.body, 'finished');
  const code = await exitOf(child);
  t.equal(code, 0, 'exit code 0');
  t.comment(`exited ${Date.now() - t0} ms after SIGTERM`);
  await t.rejects(get(port, '/x'), 'no longer accepting connections');
});
