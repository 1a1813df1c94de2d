// The run's network guard (loopback-only.mjs, preloaded by scripts/test.ts): a
// test file whose process tree reaches beyond loopback fails, naming what it tried.
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';

const guard = new URL('./loopback-only.mjs', import.meta.url).href;

async function runTestFile(t: Test, source: string): Promise<{ code: number | null; stderr: string }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'guard-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'probe.test.mjs');
  await fs.writeFile(file, source);
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: `--import=${guard}` };
  delete env.LOOPBACK_GUARD_LOG; // the probe is a test file of its own, with its own list
  const child = spawn(process.execPath, [file], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stderr };
}

t.test('a test file that connects beyond loopback fails and names the address; the connection is refused', async (t) => {
  const { code, stderr } = await runTestFile(t, `
    import net from 'node:net';
    const s = net.connect({ host: '192.0.2.1', port: 80 });
    s.on('error', (e) => console.error('caller saw: ' + e.code));
  `);
  t.equal(code, 1);
  t.match(stderr, /caller saw: ECONNREFUSED/);
  t.match(stderr, /tried to reach outside this machine:\nconnection to 192\.0\.2\.1:80/);
});

t.test('a DNS lookup of a public name and a process started by the test file are caught too', async (t) => {
  const { code, stderr } = await runTestFile(t, `
    import { lookup } from 'node:dns/promises';
    import { spawnSync } from 'node:child_process';
    await lookup('example.com').catch((e) => console.error('lookup: ' + e.code));
    spawnSync(process.execPath, ['-e', "fetch('http://198.51.100.7:8080/').catch(() => {})"], { stdio: 'inherit' });
  `);
  t.equal(code, 1);
  t.match(stderr, /lookup: ENOTFOUND/);
  t.match(stderr, /DNS lookup of example\.com/);
  t.match(stderr, /connection to 198\.51\.100\.7:8080/);
});

t.test('loopback, the name localhost, Unix sockets and a lookup of a name under .invalid (not found, RFC 6761) pass, and the file passes', async (t) => {
  const { code, stderr } = await runTestFile(t, `
    import net from 'node:net';
    import http from 'node:http';
    import { lookup } from 'node:dns/promises';
    import os from 'node:os';
    import path from 'node:path';
    const server = http.createServer((_q, s) => s.end('ok')).listen(0, '::');
    await new Promise((r) => server.on('listening', r));
    const { port } = server.address();
    for (const host of ['127.0.0.1', 'localhost', '[::1]']) {
      const res = await fetch('http://' + host + ':' + port + '/');
      if ((await res.text()) !== 'ok') throw new Error(host);
    }
    await lookup('localhost');
    const invalid = await lookup('metadata.test.invalid').catch((e) => e.code);
    if (invalid !== 'ENOTFOUND') throw new Error('.invalid: ' + invalid);
    const sock = path.join(os.tmpdir(), 'guard-' + process.pid + '.sock');
    const unix = net.createServer((c) => c.end()).listen(sock);
    await new Promise((r) => unix.on('listening', r));
    await new Promise((r, j) => net.connect(sock).on('connect', r).on('error', j));
    unix.close(); server.close();
  `);
  t.equal(code, 0, stderr);
  t.notMatch(stderr, /loopback guard/);
});
