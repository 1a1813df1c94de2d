import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));

t.test('a wrong setting stops the process with one line naming the variable and exit code 1', async (t) => {
  for (const [env, name] of [[{ HTTP_PORT: 'abc' }, 'HTTP_PORT'], [{ CACHE_MEMORY_BYTES: 'lots' }, 'CACHE_MEMORY_BYTES'], [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL']] as const) {
    const r = spawnSync(process.execPath, [main], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 10_000 });
    t.equal(r.status, 1, `${name}: exit code 1`);
    t.match(r.stderr.trim(), new RegExp(`^edge-agent: ${name}: [^\\n]+$`), `${name}: one line naming it`);
  }
  const flag = spawnSync(process.execPath, [main, '--metrics-port', '99999'], { encoding: 'utf8', timeout: 10_000 });
  t.equal(flag.status, 1);
  t.match(flag.stderr, /METRICS_PORT/);
});

t.test('a trusted proxy header needs the proxies\' ranges, and a bad range is named: one line, exit code 1', async (t) => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ TRUST_PROXY_HEADER: 'x-forwarded-for' }, /^edge-agent: TRUSTED_PROXY_CIDRS: required with TRUST_PROXY_HEADER/],
    [{ TRUSTED_PROXY_CIDRS: '10.0.0.0/8' }, /^edge-agent: TRUST_PROXY_HEADER: required with TRUSTED_PROXY_CIDRS/],
    [{ TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '10.0.0.0/8,10.0.0.5/8' }, /^edge-agent: TRUSTED_PROXY_CIDRS: "10\.0\.0\.5\/8": Host bits are set/],
    [{ TRUST_PROXY_HEADER: 'bad header', TRUSTED_PROXY_CIDRS: '10.0.0.0/8' }, /^edge-agent: TRUST_PROXY_HEADER: /],
  ];
  for (const [env, line] of cases) {
    const r = spawnSync(process.execPath, [main], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 10_000 });
    t.equal(r.status, 1, JSON.stringify(env));
    t.match(r.stderr.trim(), line);
    t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
  }
});
