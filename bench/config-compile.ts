// Configuration versions at size (issue 12 item 2): 10,000 endpoints, each
// with an origin, a route and a cache rule, filled by set-based SQL into a
// fresh database on the machine's PostgreSQL; then, through the real control
// plane (manual publish mode):
//   - compile alone (the working configuration read, built, checked and
//     encoded under the configuration lock): --n rounds, p50 and max;
//   - POST /v1/cdn/config/validate;
//   - the first POST /v1/cdn/config/publish (every body sealed and stored);
//   - a one-endpoint change and its publish: bodies stored (must be 1) and the
//     bytes of the changed resources against the whole snapshot's.
// Prints the figures and adds them to bench/results/config-compile.md.
//
// Run: npm run bench:config -- [--endpoints 10000] [--n 5]
import fs from 'node:fs';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EntityManager } from '@mikro-orm/postgresql';
import { query, RELAXED_LIMITS } from '../test/support/auth.ts';
import { caller, cdnCallers } from '../test/support/cdn.ts';
import { startTestControlPlane } from '../test/support/control-plane.ts';
import { compileConfiguration } from '../control-plane/src/cdn-config/index.ts';
import { numberFlag } from './lib/cli.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const ENDPOINTS = numberFlag('endpoints', 10_000);
const ROUNDS = numberFlag('n', 5);

const teardowns: (() => unknown)[] = [];
const cp = await startTestControlPlane({ teardown: (fn) => teardowns.push(fn) }, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'bench.example', CDN_PUBLISH_MODE: 'manual' } });
if (!cp.database.real) throw new Error('this benchmark needs the machine\'s PostgreSQL');
const { admin } = await cdnCallers(cp);
const send = caller(cp);

const ms = (start: number) => Math.round(performance.now() - start);
const fillStart = performance.now();
const series = `(select i, md5('e' || i)::uuid as e, md5('o' || i)::uuid as o from generate_series(1, ${ENDPOINTS}) i) s`;
await query(cp, `insert into cdn_endpoint (id, name, default_origin_id, hostname, status, http_version, ipv6_enabled, response_headers_policy_id, tls_config,
    compression, geo_restriction, custom_error_pages, shield_region, tags, token_auth_enabled, created_at, updated_at, version)
  select e, 'endpoint ' || i, o, 'e' || i || '.bench.example', 'deploying', 'http2', true, null,
    '{"minimum_protocol_version":"TLSv1.2","cipher_policy":"recommended","http_to_https_redirect":false}',
    '{"enabled":false,"algorithms":["br","gzip"],"min_size_bytes":1024}', '{"enabled":false,"policy":"allowlist","countries":[],"action":"block"}',
    '[]', null, '["bench"]', false, now(), now(), 1 from ${series}`);
await query(cp, `insert into cdn_origin (id, distribution_id, name, scheme, host, port, path_prefix, enabled, health_status, health_check_url,
    health_check_interval_seconds, verify_tls, allow_private_network, ssrf_protection, timeout_ms, connect_timeout_ms, max_retries, retry_on,
    forward_host_header, custom_headers, tags, created_at, updated_at, version)
  select o, e, 'origin ' || i, 'https', 'origin' || i || '.example.com', 443, '', true, 'unknown', null, 30, true, false, true, 30000, 5000, 2,
    '["connect_failure","5xx"]', true, '{}', '[]', now(), now(), 1 from ${series}`);
await query(cp, `insert into cdn_route (id, distribution_id, origin_id, name, enabled, priority, match, strip_prefix, response_headers_policy_id,
    redirect_rules, compression_enabled, created_at, updated_at, version)
  select md5('r' || i)::uuid, e, o, 'videos', true, 100, '{"hosts":[],"paths":["/videos/*"],"methods":[]}', null, null, '[]', null, now(), now(), 1 from ${series}`);
await query(cp, `insert into cdn_cache_rule (id, distribution_id, name, enabled, priority, match, ttl_seconds, browser_ttl_seconds, cache_key, bypass,
    stale_while_revalidate_seconds, stale_if_error_seconds, cache_status_header, created_at, updated_at, version)
  select md5('c' || i)::uuid, e, 'images', true, 100, '{"paths":["/img/**"],"methods":[],"content_types":[]}', 600, null,
    '{"include_headers":[],"include_query_params":[],"exclude_query_params":[],"include_cookies":[]}',
    '{"if_cookie_present":[],"if_header_present":[],"if_query_param_present":[]}', null, null, true, now(), now(), 1 from ${series}`);
await query(cp, 'vacuum analyze');
const fillMs = ms(fillStart);

// Compile alone, as a publish runs it (in a transaction holding the configuration lock).
const compileTimes: number[] = [];
let snapshotBytes = 0;
let resources = 0;
for (let round = 0; round < ROUNDS; round++) {
  const em = cp.app.db.orm.em.fork() as EntityManager;
  const started = performance.now();
  const compiled = await em.transactional(async (tx) => {
    await tx.execute(`select 1 from cdn_config_revision where id = 1 for no key update`);
    return compileConfiguration(cp.app, tx as EntityManager);
  });
  compileTimes.push(performance.now() - started);
  if (compiled.problems.length) throw new Error(`invalid: ${JSON.stringify(compiled.problems.slice(0, 3))}`);
  snapshotBytes = compiled.resources.reduce((n, r) => n + r.body.length, 0);
  resources = compiled.resources.length;
}
compileTimes.sort((a, b) => a - b);

const timed = async (what: string, fn: () => Promise<{ status: number; text: string }>, status = 201) => {
  const started = performance.now();
  const res = await fn();
  if (res.status !== status) throw new Error(`${what}: ${res.status} ${res.text.slice(0, 300)}`);
  return ms(started);
};
const bodies = async () => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_resource`))[0]!.n;
const validateMs = await timed('validate', () => send(admin, 'POST', '/v1/cdn/config/validate', {}));
const firstPublishMs = await timed('first publish', () => send(admin, 'POST', '/v1/cdn/config/publish', { description: 'bench: all' }));
const before = await bodies();
const first = (await cp.app.edgeConfig.active())!;
await query(cp, `update cdn_endpoint set name = 'changed' where id = md5('e1')::uuid`);
const onePublishMs = await timed('one-endpoint publish', () => send(admin, 'POST', '/v1/cdn/config/publish', { description: 'bench: one' }));
const newBodies = (await bodies()) - before;
const second = (await cp.app.edgeConfig.active())!;
const changed = [...second.manifest].filter(([key, entry]) => first.manifest.get(key)?.sha256 !== entry.sha256);
const changedBytes = [...(await cp.app.edgeConfig.bodies(changed.map(([, e]) => e.sha256))).values()].reduce((n, b) => n + b.length, 0);

const f = (x: number) => x.toFixed(0);
const lines = [
  `## ${new Date().toISOString()} — ${ENDPOINTS} endpoints (origin, route, cache rule each), ${os()}`,
  '',
  `| measure | figure |`,
  `|---|---|`,
  `| fill (SQL) | ${fillMs} ms |`,
  `| resources / snapshot bytes | ${resources} / ${(snapshotBytes / 1e6).toFixed(2)} MB |`,
  `| compile under the lock, ${ROUNDS} rounds | p50 ${f(compileTimes[Math.floor(compileTimes.length / 2)]!)} ms, max ${f(compileTimes[compileTimes.length - 1]!)} ms |`,
  `| POST validate | ${validateMs} ms |`,
  `| first POST publish (all bodies sealed and stored) | ${firstPublishMs} ms |`,
  `| one-endpoint change: POST publish | ${onePublishMs} ms |`,
  `| one-endpoint change: bodies stored / resources changed | ${newBodies} / ${changed.length} |`,
  `| one-endpoint change: changed bytes / snapshot bytes | ${changedBytes} / ${snapshotBytes} (${((100 * changedBytes) / snapshotBytes).toFixed(4)} %) |`,
  '',
];
console.log(lines.join('\n'));
const results = path.join(here, 'results', 'config-compile.md');
const previous = fs.existsSync(results) ? fs.readFileSync(results, 'utf8').replace(/^# .*\n\n/, '') : '';
fs.writeFileSync(results, `# Configuration compile and publish at size (bench/config-compile.ts)\n\n${lines.join('\n')}\n${previous}`);

for (const fn of teardowns.reverse()) await fn();

function os(): string {
  return `${process.version}, ${process.env.CI ? 'CI' : 'dev host'}, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} on ${cpus().length} cores`;
}
