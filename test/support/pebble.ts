// A real ACME server for the ACME tests only: Debian's pebble (RFC 8555 test
// CA) with pebble-challtestsrv as the DNS server its validation authority
// asks. Free ports chosen at run time, a TLS certificate for localhost made
// here (ACME_CA_BUNDLE points at its CA), both processes killed in teardown.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Agent, request } from 'node:https';
import { makeCa, makeLeaf } from './certificates.ts';

export const PEBBLE_INSTALL_HINT = 'pebble is not installed: apt-get install pebble (it provides pebble and pebble-challtestsrv)';

/** Whether pebble and pebble-challtestsrv are on PATH. */
export const pebbleInstalled = () => ['pebble', 'pebble-challtestsrv'].every((cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0);

export interface Pebble {
  directoryUrl: string;
  /** The PEM file of the CA that signed pebble's TLS certificate (for ACME_CA_BUNDLE). */
  caBundle: string;
  /** The DNS server pebble validates against (host:port), also for the test's resolver. */
  dnsServer: string;
  setTxt(host: string, value: string): Promise<void>;
  clearTxt(host: string): Promise<void>;
  /** A GET on pebble's management interface (roots/0, intermediates/0, cert-status-by-serial/<serial>). */
  management(pathname: string): Promise<{ status: number; text: string }>;
  /** Stops pebble (the ACME server becomes unreachable); challtestsrv stays. */
  stopAcme(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    }).on('error', reject);
  });
}

const stop = (child: ChildProcess) => new Promise<void>((resolve) => {
  if (child.exitCode !== null || child.signalCode !== null) return resolve();
  child.once('exit', () => resolve());
  child.kill('SIGTERM');
});

/** Polls `check` every 100 ms until it passes, for at most `ms` (a process start-up, not a timing assertion). */
async function waitFor(what: string, ms: number, check: () => Promise<boolean>, output: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not start within ${ms / 1000} s:\n${output()}`);
}

export async function startPebble(t: { teardown(fn: () => unknown): void }): Promise<Pebble> {
  const dir = mkdtempSync(path.join(tmpdir(), 'pebble-'));
  const ca = await makeCa('Pebble TLS test CA');
  const tls = await makeLeaf(ca, ['localhost'], { days: 30 });
  const caBundle = path.join(dir, 'ca.pem');
  writeFileSync(caBundle, ca.pem);
  writeFileSync(path.join(dir, 'cert.pem'), tls.certPem + ca.pem);
  writeFileSync(path.join(dir, 'key.pem'), tls.keyPem);
  const [acmePort, managementPort, dnsPort, challPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  writeFileSync(path.join(dir, 'pebble.json'), JSON.stringify({
    pebble: {
      listenAddress: `127.0.0.1:${acmePort}`, managementListenAddress: `127.0.0.1:${managementPort}`,
      certificate: path.join(dir, 'cert.pem'), privateKey: path.join(dir, 'key.pem'),
      httpPort: 5002, tlsPort: 5001, ocspResponderURL: '', externalAccountBindingRequired: false,
    },
  }));
  const dnsServer = `127.0.0.1:${dnsPort}`;
  let output = '';
  const collect = (child: ChildProcess) => {
    child.stdout?.on('data', (d) => { output = (output + d).slice(-4000); });
    child.stderr?.on('data', (d) => { output = (output + d).slice(-4000); });
    return child;
  };
  const chall = collect(spawn('pebble-challtestsrv', [
    '-dns01', dnsServer, '-management', `127.0.0.1:${challPort}`, '-http01', '', '-https01', '', '-tlsalpn01', '',
    '-defaultIPv4', '127.0.0.1', '-defaultIPv6', '',
  ], { stdio: ['ignore', 'pipe', 'pipe'] }));
  // No sleeps before validation, no nonces rejected at random, no authorization reused: each run takes the same path.
  const env = { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' };
  const pebble = collect(spawn('pebble', ['-config', path.join(dir, 'pebble.json'), '-dnsserver', dnsServer], { env, stdio: ['ignore', 'pipe', 'pipe'] }));
  const stopAll = async () => {
    await Promise.all([stop(pebble), stop(chall)]);
    rmSync(dir, { recursive: true, force: true });
  };
  t.teardown(stopAll);

  const agent = new Agent({ ca: ca.pem });
  const get = (url: string) => new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request(url, { agent, timeout: 5_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (d) => { text += d; }).on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout'))).on('error', reject).end();
  });
  const challtest = async (op: string, body: unknown) => {
    const res = await fetch(`http://127.0.0.1:${challPort}/${op}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(5_000) });
    if (!res.ok) throw new Error(`challtestsrv ${op}: ${res.status}`);
  };
  const directoryUrl = `https://localhost:${acmePort}/dir`;
  try {
    await waitFor('pebble', 15_000, async () => (await get(directoryUrl)).status === 200, () => output);
    await waitFor('pebble-challtestsrv', 15_000, async () => (await fetch(`http://127.0.0.1:${challPort}/clear-txt`, { method: 'POST', body: '{"host":"probe."}' })).ok, () => output);
  } catch (error) {
    await stopAll(); // a failed start leaves no process behind
    throw error;
  }
  return {
    directoryUrl, caBundle, dnsServer,
    setTxt: (host, value) => challtest('set-txt', { host: `${host}.`, value }),
    clearTxt: (host) => challtest('clear-txt', { host: `${host}.` }),
    management: (pathname) => get(`https://localhost:${managementPort}/${pathname}`),
    stopAcme: () => stop(pebble),
  };
}
