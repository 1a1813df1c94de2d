// The example snapshot docs/guides/edge-agent.md gives for `npm run edge-agent -- --config-file`
// (edge-agent/examples/snapshot.json) is one the agent process accepts, and it
// does what the guide says: example.localhost cached in front of a local origin.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { exitOf, startAgentProcess, startOrigin } from './helpers.ts';

const exampleFile = fileURLToPath(new URL('../examples/snapshot.json', import.meta.url));

t.test('the edge-agent guide\'s example snapshot starts an agent that caches example.localhost: MISS, then HIT', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('hello from the origin\n'));
  const example = JSON.parse(readFileSync(exampleFile, 'utf8'));
  t.equal(example.endpoints[0].origins[0].port, 8000, 'the guide starts its origin on port 8000');
  example.endpoints[0].origins[0].port = origin.port; // the test's own origin instead of port 8000
  const dir = mkdtempSync(join(tmpdir(), 'edge-example-'));
  const configFile = join(dir, 'snapshot.json');
  writeFileSync(configFile, JSON.stringify(example));
  const { child, port } = await startAgentProcess({ DATA_DIR: join(dir, 'data'), CONFIG_FILE: configFile });
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await origin.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const get = async () => {
    const res = await request(`http://127.0.0.1:${port}/index.html`, { headers: { host: 'example.localhost' } });
    return { status: res.statusCode, cache: res.headers['x-cache-status'], body: await res.body.text() };
  };
  t.same(await get(), { status: 200, cache: 'MISS', body: 'hello from the origin\n' });
  t.same(await get(), { status: 200, cache: 'HIT', body: 'hello from the origin\n' });
  t.equal(origin.count('/index.html'), 1, 'one origin fetch');
  child.kill('SIGTERM');
  t.equal(await exitOf(child), 0);
});
