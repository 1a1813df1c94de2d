// The CDN lists at size (issue 11): 100,000 origins, 100,000 routes, 100,000
// cache rules, 10,000 endpoints and 1,000,000 audit entries, each top-level
// list measured through HTTP with `q`, each filter, the sorts, and a deep page
// reached by cursor. Goal: p99 under 50 ms for every line.
//
// One run:
//   1. a fresh sp_bench_cdn_* database on the machine's PostgreSQL, migrated
//      by the product's migrations, filled with set-based SQL (generate_series;
//      secondary indexes dropped during the fill and rebuilt from their own
//      definitions, foreign-key triggers off: the rows are consistent by
//      construction), then VACUUM ANALYZE;
//   2. the real control plane (startControlPlane, production code) in a child
//      process on that database and the machine's Redis; an admin logs in;
//   3. per query: one request with the child recording the list's SQL, a
//      warm-up, then --n sequential requests (p50/p99/max), and the same SQL
//      (data and count statements, concurrently as the list sends them, and
//      the estimate that follows a count over 1,000: meta.total, http/paging.ts)
//      through raw `pg` as the baseline, so the frame's share is visible.
// The table is printed and added to bench/results/cdn-lists.md (newest first).
// EXPLAIN ANALYZE of every statement goes to $TMPDIR/cdn-lists-plans.txt.
//
// Run: npm run bench:cdn-lists -- [--n 200] [--warmup 20] [--scale 1] [--keep]
//   --scale 0.1 fills a tenth (quick runs); --keep leaves the database.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { numberFlag } from './lib/cli.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const N = numberFlag('n', 200);
const WARMUP = numberFlag('warmup', 20);
const SCALE = numberFlag('scale', 1);
const KEEP = args.includes('--keep');
const CP_PORT = 18821;
const GOAL_MS = 50;
const PASSWORD = 'Bench-Password-42';
const LIST_TABLES = /\bfrom "?(cdn_endpoint|cdn_origin|cdn_route|cdn_cache_rule|audit_log)"?/i;

const COUNTS = {
  endpoints: Math.round(10_000 * SCALE),
  origins: Math.round(100_000 * SCALE),
  routes: Math.round(100_000 * SCALE),
  cacheRules: Math.round(100_000 * SCALE),
  audit: Math.round(1_000_000 * SCALE),
};

// ---- the fill -----------------------------------------------------------------

const WORDS = [
  'media', 'video', 'api', 'static', 'images', 'assets', 'live', 'vod', 'stream', 'player', 'thumbnails', 'manifests', 'segments', 'downloads', 'uploads',
  'catalog', 'search', 'account', 'checkout', 'docs', 'blog', 'news', 'sports', 'music', 'kids', 'trailers', 'posters', 'subtitles', 'audio', 'legacy',
];
const REGIONS = ['eu-west', 'eu-central', 'us-east', 'us-west', 'ap-south', 'ap-northeast', 'sa-east', 'af-south'];
/** In one row in five of every list: the common word of `q`. */
const COMMON = 'media';
/** In a handful of rows of each list: the rare word of `q`. */
const RARE = 'zephyr';
const sqlArray = (values: readonly string[]) => `array[${values.map((v) => `'${v}'`).join(',')}]`;
/** A word of the list chosen by a spread of i (never the common word, which is placed on purpose). */
const word = (i: string, k: number) => `(${sqlArray(WORDS.slice(1))})[1 + ((${i}::bigint * ${k}) % ${WORDS.length - 1})]`;
/** The first word of a name: the common word in one row in five, the rare one in one row in 20,000. */
const lead = (i: string) => `case when ${i} % 20000 = 777 then '${RARE}' when ${i} % 5 = 0 then '${COMMON}' else ${word(i, 7919)} end`;
const region = (i: string) => `(${sqlArray(REGIONS)})[1 + (${i} % ${REGIONS.length})]`;
/** A timestamp spread over the last year, deterministic in i. */
const spreadTime = (i: string, k = 7919) => `(now() - ((${i}::bigint * ${k}) % 31536000) * interval '1 second')`;
/** A version-4-shaped uuid from md5(kind || i): rows refer to each other without a lookup (uuidOf is the same in JS). */
const id = (kind: string, i: string) => `overlay(overlay(md5('${kind}' || ${i}) placing '4' from 13) placing '8' from 17)::uuid`;
const tags = (i: string) => `(case ${i} % 4 when 0 then '[]'::jsonb when 1 then jsonb_build_array(${word(i, 31)}) else jsonb_build_array(${word(i, 31)}, ${region(i)}) end)`;

const { endpoints: E, origins: O, routes: R, cacheRules: C, audit: A } = COUNTS;
/** The endpoint an origin belongs to (origin e is endpoint e's default); one free origin in twenty beyond those. */
const originEndpoint = (i: string) => `((${i} - 1) % ${E}) + 1`;

const AUDIT_TYPES = [
  // [resource_type, weight]: CDN types (the CDN list's scope) and account-side ones the list leaves out
  ['origin', 20], ['route', 15], ['cache_rule', 12], ['endpoint', 8], ['purge_request', 10], ['api_token', 3], ['admin_user', 2], ['custom_domain', 3],
  ['certificate', 2], ['signing_key', 1], ['ip_rule', 1], ['response_headers_policy', 1], ['edge_node', 0.05],
  ['user', 10], ['profile', 6], ['subscription', 4], ['payment_method', 1.95],
] as const;
const VERBS = ['created', 'updated', 'updated', 'updated', 'enabled', 'disabled', 'deleted'];

function auditTypeCase(i: string): string {
  const total = AUDIT_TYPES.reduce((s, [, w]) => s + w, 0);
  let upTo = 0;
  const whens = AUDIT_TYPES.map(([type, w]) => {
    upTo += w;
    return `when (${i}::bigint * 7919) % 10000 < ${Math.round((upTo / total) * 10000)} then '${type}'`;
  });
  return `case ${whens.join(' ')} else 'user' end`;
}

const FILL = [
  `insert into cdn_endpoint (id, name, default_origin_id, hostname, status, http_version, ipv6_enabled, response_headers_policy_id, tls_config, compression,
     geo_restriction, custom_error_pages, shield_region, tags, created_at, updated_at, version)
   select ${id('e', 'i')}, ${lead('i')} || ' ' || ${word('i', 13)} || ' ' || ${region('i')} || ' ' || i, ${id('o', 'i')},
     'e' || substr(md5('h' || i), 1, 15) || '.cdn.example.net',
     (array['active','active','active','deploying','disabled','error'])[1 + (i % 6)], (array['http2','http2and3','http1.1'])[1 + (i % 3)], i % 3 <> 0, null,
     '{"minimum_protocol_version":"TLSv1.2","cipher_policy":"recommended","http_to_https_redirect":true}',
     '{"enabled":true,"algorithms":["br","gzip"],"min_size_bytes":1024}', '{"enabled":false,"policy":"blocklist","countries":[],"action":"block"}', '[]',
     null, ${tags('i')}, ${spreadTime('i', 104729)}, ${spreadTime('i', 104729)} + interval '1 hour', 1
   from generate_series(1, ${E}) as i`,
  `insert into cdn_origin (id, distribution_id, name, scheme, host, port, path_prefix, enabled, health_status, health_check_url, health_check_interval_seconds,
     verify_tls, allow_private_network, ssrf_protection, timeout_ms, connect_timeout_ms, max_retries, retry_on, forward_host_header, custom_headers, tags,
     created_at, updated_at, version)
   select ${id('o', 'i')}, case when i > ${E} and i % 20 = 0 then null else ${id('e', originEndpoint('i'))} end,
     ${lead('i')} || ' ' || ${word('i', 17)} || ' origin ' || i, 'https',
     ${lead('i')} || '-' || ${word('i', 17)} || '-' || i || '.' || ${region('i')} || '.origin.example.com', 443, '',
     (i / 7) % 10 <> 0, (array['healthy','healthy','healthy','healthy','healthy','healthy','healthy','degraded','unhealthy','unknown'])[1 + ((i / 3) % 10)],
     null, 30, true, false, true, 30000, 5000, 2, '["connect_failure","5xx"]', true, '{}', ${tags('i')},
     ${spreadTime('i')}, ${spreadTime('i')} + ((i % 1000) * interval '1 minute'), 1
   from generate_series(1, ${O}) as i`,
  // One route in a thousand goes to origin 1 (a busy origin); the others spread over all origins.
  `insert into cdn_route (id, distribution_id, origin_id, name, enabled, priority, match, strip_prefix, response_headers_policy_id, redirect_rules,
     compression_enabled, created_at, updated_at, version)
   select ${id('r', 'i')}, ${id('e', originEndpoint('o'))}, ${id('o', 'o')}, ${lead('i')} || ' ' || ${word('i', 19)} || ' route ' || i, i % 8 <> 0, (i % 50) * 10,
     jsonb_build_object('hosts', '[]'::jsonb, 'paths', jsonb_build_array('/' || ${word('i', 19)} || '/*'), 'methods', '["GET","HEAD"]'::jsonb),
     null, null, '[]', null, ${spreadTime('i', 6007)}, ${spreadTime('i', 6007)} + interval '5 minutes', 1
   from (select i, case when i % 1000 = 0 then 1 else ((i::bigint * 7919) % ${O}) + 1 end as o from generate_series(1, ${R}) as i) as r`,
  `insert into cdn_cache_rule (id, distribution_id, name, enabled, priority, match, ttl_seconds, browser_ttl_seconds, cache_key, bypass,
     stale_while_revalidate_seconds, stale_if_error_seconds, cache_status_header, created_at, updated_at, version)
   select ${id('c', 'i')}, ${id('e', `((i - 1) % ${E}) + 1`)}, ${lead('i')} || ' ' || ${word('i', 23)} || ' cache ' || i, i % 7 <> 0, (i % 20) * 10,
     jsonb_build_object('paths', jsonb_build_array('/' || ${word('i', 23)} || '/*'), 'methods', '["GET","HEAD"]'::jsonb, 'content_types', '[]'::jsonb),
     (array[60, 300, 3600, 86400])[1 + (i % 4)], null,
     '{"include_headers":[],"include_query_params":[],"exclude_query_params":[],"include_cookies":[]}',
     '{"if_cookie_present":[],"if_header_present":[],"if_query_param_present":[]}', null, null, true,
     ${spreadTime('i', 3001)}, ${spreadTime('i', 3001)} + interval '1 day', 1
   from generate_series(1, ${C}) as i`,
  // 200 actors (users and API tokens), one entry in twenty by the platform itself; resource ids point at real rows.
  `insert into audit_log (id, action, actor_id, actor_type, actor_role, resource_type, resource_id, ip_address, user_agent, request_id, metadata, created_at)
   select gen_random_uuid(), t || '.' || (${sqlArray(VERBS)})[1 + ((i::bigint * 13) % ${VERBS.length})],
     case when i % 20 = 0 then null else ${id('actor', 'i % 200')} end,
     case when i % 20 = 0 then 'system' when i % 200 < 40 then 'api_token' else 'user' end,
     case when i % 20 = 0 then null else (array['admin','operator','superadmin'])[1 + (i % 3)] end,
     t, case t when 'origin' then ${id('o', `1 + (i::bigint * 7) % ${O}`)}::text when 'route' then ${id('r', `1 + (i::bigint * 7) % ${R}`)}::text
       when 'cache_rule' then ${id('c', `1 + (i::bigint * 7) % ${C}`)}::text when 'endpoint' then ${id('e', `1 + (i::bigint * 7) % ${E}`)}::text
       else ${id('', "t || (i % 50000)")}::text end,
     '10.' || (i % 250) || '.' || ((i / 250) % 250) || '.' || (i % 7), 'console/2.4 (bench)', 'req-' || i,
     jsonb_build_object('changes', jsonb_build_object('enabled', jsonb_build_object('from', i % 2 = 0, 'to', i % 2 = 1))),
     ${spreadTime('i', 15485863)}
   from (select i, ${auditTypeCase('i')} as t from generate_series(1, ${A}) as i) as a`,
];
const FILLED_TABLES = ['cdn_endpoint', 'cdn_origin', 'cdn_route', 'cdn_cache_rule', 'audit_log'];

async function fill(client: pg.Client): Promise<void> {
  await client.query(`set synchronous_commit = off`);
  await client.query(`set maintenance_work_mem = '256MB'`);
  // Indexes are built once after the rows are in (the indexes behind constraints stay).
  const { rows: indexes } = await client.query<{ name: string; def: string }>(
    `select i.indexrelid::regclass::text as name, pg_get_indexdef(i.indexrelid) as def from pg_index i
     where i.indrelid = any($1::regclass[]) and not exists (select 1 from pg_constraint c where c.conindid = i.indexrelid)`,
    [FILLED_TABLES],
  );
  for (const { name } of indexes) await client.query(`drop index ${name}`);
  await client.query(`set session_replication_role = replica`); // no FK triggers: the rows are consistent by construction
  for (const sql of FILL) {
    const started = performance.now();
    const res = await client.query(sql);
    console.log(`  ${/into (\w+)/.exec(sql)![1]}: ${res.rowCount} rows in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
  await client.query(`set session_replication_role = origin`);
  const started = performance.now();
  for (const { def } of indexes) await client.query(def);
  console.log(`  ${indexes.length} indexes rebuilt in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  await client.query(`vacuum analyze ${FILLED_TABLES.join(', ')}`); // the steady state autovacuum keeps: statistics and the visibility map
}

// ---- the queries ----------------------------------------------------------------

interface Case {
  list: string;
  label: string;
  path: string;
  /** A deep page: the cursor of the row at this offset of the list in this order. */
  deep?: { table: string; where: string; sort: { field: string; direction: 'asc' | 'desc' } };
}

const CDN_TYPES = `('endpoint','origin','route','cache_rule','purge_request','prefetch_job','custom_domain','certificate','response_headers_policy','signing_key',
  'ip_rule','log_drain','config_version','edge_node','agent_token','admin_user','api_token')`;

/** The lines, in order; `auditedOrigin` is an origin id the audit log has entries about. */
function cases(auditedOrigin: string): Case[] {
  const top = (list: string, segment: string, table: string, filters: [string, string][], sorts: string[]): Case[] => [
    { list, label: 'no filter', path: `/v1/cdn/${segment}` },
    { list, label: `q=${COMMON} (common)`, path: `/v1/cdn/${segment}?q=${COMMON}` },
    { list, label: `q=${RARE} (rare)`, path: `/v1/cdn/${segment}?q=${RARE}` },
    { list, label: `q=${COMMON} ${WORDS[3]} (two words)`, path: `/v1/cdn/${segment}?q=${encodeURIComponent(`${COMMON} ${WORDS[3]}`)}` },
    ...filters.map(([label, query]): Case => ({ list, label, path: `/v1/cdn/${segment}?${query}` })),
    ...sorts.map((sort): Case => ({ list, label: `sort=${sort}`, path: `/v1/cdn/${segment}?sort=${sort}` })),
    { list, label: 'deep page (cursor at the middle)', path: `/v1/cdn/${segment}`, deep: { table, where: 'true', sort: { field: 'created_at', direction: 'desc' } } },
    { list, label: 'deep page, sort=name', path: `/v1/cdn/${segment}?sort=name`, deep: { table, where: 'true', sort: { field: 'name', direction: 'asc' } } },
    { list, label: `q=${COMMON}, limit=100`, path: `/v1/cdn/${segment}?q=${COMMON}&limit=100` },
  ];
  const from = new Date(Date.now() - 30 * 86_400_000).toISOString();
  const to = new Date(Date.now() - 23 * 86_400_000).toISOString();
  const originOne = uuidOf('o', 1);
  const originTypical = uuidOf('o', 4242);
  return [
    ...top('endpoints', 'endpoints', 'cdn_endpoint', [['status=active', 'status=active'], ['status=error', 'status=error']], ['name', '-name', 'updated_at']),
    ...top('origins', 'origins', 'cdn_origin', [
      ['enabled=true', 'enabled=true'], ['enabled=false', 'enabled=false'], ['health_status=healthy', 'health_status=healthy'],
      ['health_status=unhealthy', 'health_status=unhealthy'], ['enabled=false&health_status=degraded', 'enabled=false&health_status=degraded'],
      [`q=${COMMON}&enabled=false`, `q=${COMMON}&enabled=false`],
    ], ['name', '-name', 'host', '-updated_at']),
    ...top('routes', 'routes', 'cdn_route', [
      ['enabled=true', 'enabled=true'], ['enabled=false', 'enabled=false'], ['origin_id (busy origin: 100 routes)', `origin_id=${originOne}`],
      ['origin_id (typical origin)', `origin_id=${originTypical}`], [`q=${COMMON}&enabled=false`, `q=${COMMON}&enabled=false`],
    ], ['name', '-name', 'priority', '-priority', 'updated_at']),
    ...top('cache rules', 'cache-rules', 'cdn_cache_rule', [['enabled=true', 'enabled=true'], ['enabled=false', 'enabled=false']], ['name', '-name', 'priority', '-updated_at']),
    ...[
      ['no filter', ''], ['actor_id', `actor_id=${uuidOf('actor', 7)}`], ['resource_type=origin', 'resource_type=origin'],
      ['resource_type=edge_node (rare)', 'resource_type=edge_node'], ['resource_type=user (outside the CDN scope)', 'resource_type=user'],
      ['resource_id (an origin)', `resource_id=${auditedOrigin}`], ['action=origin.updated', 'action=origin.updated'], ['action=origin.*', `action=${encodeURIComponent('origin.*')}`],
      ['action=cert* (prefix)', `action=${encodeURIComponent('cert*')}`], ['from/to (one week)', `from=${from}&to=${to}`], ['from (last 30 days)', `from=${from}`],
      ['actor_id + action=route.*', `actor_id=${uuidOf('actor', 7)}&action=${encodeURIComponent('route.*')}`],
      ['resource_type=origin + from/to', `resource_type=origin&from=${from}&to=${to}`],
      ['sort=action', 'sort=action'], ['sort=-action', 'sort=-action'], ['sort=created_at (oldest first)', 'sort=created_at'], ['limit=100', 'limit=100'],
    ].map(([label, query]): Case => ({ list: 'audit log', label: label!, path: `/v1/cdn/audit-logs${query ? `?${query}` : ''}` })),
    { list: 'audit log', label: 'deep page (cursor at the middle)', path: '/v1/cdn/audit-logs', deep: { table: 'audit_log', where: `resource_type in ${CDN_TYPES}`, sort: { field: 'created_at', direction: 'desc' } } },
    { list: 'audit log', label: 'deep page, sort=action', path: '/v1/cdn/audit-logs?sort=action', deep: { table: 'audit_log', where: `resource_type in ${CDN_TYPES}`, sort: { field: 'action', direction: 'asc' } } },
  ];
}

/** The uuid the fill gives row i of a kind (see id()). */
function uuidOf(kind: string, i: number): string {
  const md5 = createHash('md5').update(`${kind}${i}`).digest('hex');
  const hex = `${md5.slice(0, 12)}4${md5.slice(13, 16)}8${md5.slice(17)}`;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// ---- measuring -------------------------------------------------------------------

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const stats = (samples: number[]) => {
  const s = [...samples].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1]! };
};
const fmt = (n: number) => n.toFixed(1);

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    try {
      await (await fetch(url)).arrayBuffer();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`${url} did not come up`);
}

async function main(): Promise<void> {
  const { detectServices } = await import('../test/support/services.ts');
  const { adminQuery, dropDatabase, withDatabaseName } = await import('../test/support/database.ts');
  const { openDatabase } = await import('../control-plane/src/db/orm.ts');
  const { entities } = await import('../control-plane/src/capabilities.ts');
  const { createAdminCommand } = await import('../control-plane/src/admin/create-admin.ts');
  const { encodeCursor } = await import('../control-plane/src/http/paging.ts');
  const services = await detectServices();
  if (!services.postgresUrl) throw new Error('bench:cdn-lists needs PostgreSQL (127.0.0.1:5432 or TEST_POSTGRES_URL)');
  const dbName = `sp_bench_cdn_${Date.now().toString(36)}`;
  const url = withDatabaseName(services.postgresUrl, dbName);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sp-bench-cdn-'));
  let cp: ChildProcess | undefined;
  const raw = new pg.Pool({ connectionString: url, max: 2 });
  try {
    await adminQuery(services.postgresUrl, `create database ${dbName}`);
    const db = await openDatabase({ databaseUrl: url, dataDir, entities, poolMax: 1 });
    const email = 'bench-cdn-admin@example.com';
    await createAdminCommand.run({ db, publicUrl: '', io: { out: () => {}, err: () => {} } }, { email, password: PASSWORD, role: 'admin' });
    await db.close();

    console.log(`filling ${dbName}: ${JSON.stringify(COUNTS)}`);
    const started = performance.now();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await fill(client);
    } finally {
      await client.end();
    }
    const fillSeconds = (performance.now() - started) / 1000;
    console.log(`  filled and analysed in ${fillSeconds.toFixed(1)} s`);

    const env = { ...process.env, DATABASE_URL: url, DATA_DIR: dataDir } as Record<string, string>;
    if (services.redisUrl) env.REDIS_URL = services.redisUrl; else delete env.REDIS_URL;
    cp = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve-cp'], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise<void>((resolve, reject) => {
      cp!.once('message', () => resolve());
      cp!.once('exit', (code) => reject(new Error(`control plane exited with ${code}`)));
    });
    const base = `http://127.0.0.1:${CP_PORT}`;
    await waitFor(`${base}/healthz`);
    // Access tokens live 15 minutes and a run is longer: a fresh login every 10 minutes, between lines
    // (logins are limited to 10 per account in 15 minutes).
    const headers = { authorization: '' };
    let loggedInAt = 0;
    const logIn = async () => {
      if (Date.now() - loggedInAt < 10 * 60_000) return;
      loggedInAt = Date.now();
      const login = await fetch(`${base}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) });
      if (login.status !== 200) throw new Error(`login: ${login.status} ${await login.text()}`);
      headers.authorization = `Bearer ${((await login.json()) as { data: { access_token: string } }).data.access_token}`;
    };
    const { rows: [audited] } = await raw.query(`select resource_id from audit_log where resource_type = 'origin' order by created_at desc limit 1`);

    const child = cp;
    const recorded = async (target: string): Promise<{ statements: string[]; body: { data: unknown[]; meta: { total: number } } }> => {
      child.send({ record: true });
      const res = await fetch(target, { headers });
      const body = await res.json() as { data: unknown[]; meta: { total: number } };
      if (res.status !== 200) throw new Error(`${target}: ${res.status} ${JSON.stringify(body)}`);
      const reply = new Promise<string[]>((resolve) => child.once('message', (m: { statements: string[] }) => resolve(m.statements)));
      child.send({ record: false });
      return { statements: await reply, body };
    };
    const timed = async (fn: () => Promise<unknown>) => {
      const t = performance.now();
      await fn();
      return performance.now() - t;
    };
    const httpOnce = async (target: string) => {
      const res = await fetch(target, { headers });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`${target}: ${res.status}`);
    };

    const plansFile = path.join(os.tmpdir(), 'cdn-lists-plans.txt');
    fs.writeFileSync(plansFile, '');
    const rows: string[][] = [];
    const misses: string[] = [];
    for (const c of cases(audited.resource_id)) {
      await logIn();
      let target = `${base}${c.path}`;
      if (c.deep) {
        const { field, direction } = c.deep.sort;
        const { rows: [{ count }] } = await raw.query(`select count(*)::int as count from ${c.deep.table} where ${c.deep.where}`);
        const { rows: [middle] } = await raw.query(
          `select id, ${field} from ${c.deep.table} where ${c.deep.where} order by ${field} ${direction}, id ${direction} offset ${Math.floor(count / 2)} limit 1`,
        );
        target += `${target.includes('?') ? '&' : '?'}cursor=${encodeCursor(c.deep.sort, middle, 'n')}`;
      }
      const { statements, body } = await recorded(target);
      for (let i = 0; i < WARMUP; i++) await httpOnce(target);
      const http: number[] = [];
      for (let i = 0; i < N; i++) http.push(await timed(() => httpOnce(target)));
      // The list's statements as it sends them (http/paging.ts): data and count at once, on two
      // connections, the count followed by the planner's estimate when more than 1,000 rows match;
      // with `q`, the count first (it decides how the page is read), then the page beside the estimate.
      const estimates = statements.filter((sql) => /^explain\b/i.test(sql));
      const counts = statements.filter((sql) => /^select count\(/i.test(sql));
      const pages = statements.filter((sql) => !estimates.includes(sql) && !counts.includes(sql));
      const inOrder = async (list: string[]) => {
        for (const sql of list) await raw.query(sql);
      };
      const replay = statements.some((sql) => sql.includes('search_document @@'))
        ? async () => {
          await inOrder(counts);
          await Promise.all([inOrder(pages), inOrder(estimates)]);
        }
        : () => Promise.all([...pages.map((sql) => raw.query(sql)), inOrder([...counts, ...estimates])]);
      for (let i = 0; i < Math.min(WARMUP, 5); i++) await replay();
      const sql: number[] = [];
      for (let i = 0; i < N; i++) sql.push(await timed(replay));
      for (const statement of statements) {
        if (estimates.includes(statement)) {
          fs.appendFileSync(plansFile, `== ${c.list}: ${c.label}\n${statement}\n(the estimate behind meta.total: planned, not run)\n\n`);
          continue;
        }
        const plan = await raw.query(`explain (analyze, buffers) ${statement}`);
        fs.appendFileSync(plansFile, `== ${c.list}: ${c.label}\n${statement}\n${plan.rows.map((r) => r['QUERY PLAN']).join('\n')}\n\n`);
      }
      const h = stats(http);
      const s = stats(sql);
      const line = [c.list, c.label, String(body.meta.total), fmt(h.p50), fmt(h.p99), fmt(h.max), fmt(s.p50), fmt(s.p99), h.p99 < GOAL_MS ? 'yes' : '**no**'];
      rows.push(line);
      if (h.p99 >= GOAL_MS) misses.push(`${c.list}: ${c.label}`);
      console.log(line.join(' | '));
    }

    const load = os.loadavg().map((l) => l.toFixed(2)).join(' ');
    const table = [
      `| list | query | meta.total | HTTP p50 | HTTP p99 | HTTP max | SQL p50 | SQL p99 | p99 < ${GOAL_MS} ms |`,
      '|---|---|---:|---:|---:|---:|---:|---:|---|',
      ...rows.map((r) => `| ${r.join(' | ')} |`),
    ].join('\n');
    const report = [
      `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
      '',
      `Rows: ${COUNTS.endpoints.toLocaleString('en')} endpoints, ${COUNTS.origins.toLocaleString('en')} origins, ${COUNTS.routes.toLocaleString('en')} routes, `
        + `${COUNTS.cacheRules.toLocaleString('en')} cache rules, ${COUNTS.audit.toLocaleString('en')} audit entries (fill ${fillSeconds.toFixed(0)} s). `
        + `${N} sequential requests per line after ${WARMUP} warm-up; times in ms; SQL = the list's own statements through raw pg (data and count concurrently, the count followed by the planner's estimate when over 1,000; with q the count first, then the page beside the estimate). `
        + `${os.cpus().length} cores, load average ${load} (at the end).`,
      '',
      table,
      '',
      misses.length ? `Over the goal: ${misses.join('; ')}.` : `Every line under ${GOAL_MS} ms at p99.`,
      '',
    ].join('\n');
    console.log(`\n${report}\nplans: ${plansFile}`);
    const resultsFile = path.join(here, 'results', 'cdn-lists.md');
    const previous = fs.existsSync(resultsFile) ? fs.readFileSync(resultsFile, 'utf8').replace(/^# .*\n\n?/, '') : '';
    fs.writeFileSync(resultsFile, `# bench/cdn-lists.ts (newest first)\n\n${report}\n${previous}`);
  } finally {
    if (cp && cp.exitCode === null) {
      cp.kill('SIGTERM');
      await new Promise((resolve) => cp!.once('exit', resolve));
    }
    await raw.end();
    if (!KEEP) await dropDatabase(services.postgresUrl, dbName);
    else console.log(`kept database ${dbName}`);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

// ---- child mode: the control plane, recording the list's SQL on request -------

async function serveControlPlane(): Promise<void> {
  const { loadConfig } = await import('../control-plane/src/config/config.ts');
  const { startControlPlane } = await import('../control-plane/src/server.ts');
  const { openDatabase } = await import('../control-plane/src/db/orm.ts');
  const { entities } = await import('../control-plane/src/capabilities.ts');
  const config = loadConfig({
    ...process.env, PORT: String(CP_PORT), GRPC_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', RATE_LIMIT_PER_MINUTE: '0', NODE_ENV: 'development', JOBS_WORKER: 'false',
  });
  let recording: string[] | undefined;
  const db = await openDatabase({
    databaseUrl: config.DATABASE_URL, dataDir: config.dataDir, entities,
    onQuery: (sql, params) => { if (recording && LIST_TABLES.test(sql)) recording.push(db.orm.em.getPlatform().formatQuery(sql, params)); },
  });
  const cp = await startControlPlane(config, { db, storeKeyPrefix: `bench:${process.pid}:` });
  process.on('message', (message: { record?: boolean }) => {
    if (message.record) recording = [];
    else {
      process.send!({ statements: recording ?? [] });
      recording = undefined;
    }
  });
  const stop = () => { void cp.close().then(() => db.close()).finally(() => process.exit(0)); };
  process.on('SIGTERM', stop);
  process.on('disconnect', stop); // the bench went away, however it ended
  process.send!({ ready: true });
}

if (args[0] === '--serve-cp') await serveControlPlane();
else await main();
