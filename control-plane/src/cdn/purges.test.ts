// Purge requests through the real server (document 3 §2, §3, §4.1, §4.5;
// DESIGN.md §5): submit at the top level and per endpoint/distribution,
// 202 pending with a platform-wide sequence, the path/tag rules per type, the
// deprecated `type` alias, history newest first with filters, read, roles,
// Idempotency-Key, the per-caller budget, audit.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createLoggedInUser, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { PURGES_PER_MINUTE } from './purge-routes.ts';

const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net' } });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint } = await makeEndpoint(cp, admin);

const purgeRows = async () => ({
  purges: await query(cp, `select * from cdn_purge_request order by sequence`),
  audit: (await query<{ n: number }>(cp, `select count(*)::int as n from audit_log`))[0]!.n,
});

t.test('POST /v1/cdn/endpoints/{id}/purge: 202 with the request pending, sequence-numbered, submitted_by, audit-logged', async (t) => {
  const res = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/videos/a.mp4', '/index.html?v=2'] });
  t.equal(res.status, 202, res.text);
  t.match(res.body, {
    distribution_id: endpoint.id, purge_type: 'path', type: 'path', paths: ['/videos/a.mp4', '/index.html?v=2'], tags: [], status: 'pending',
    edge_nodes_total: 0, edge_nodes_completed: 0, submitted_by: operator.id, completed_at: null,
  });
  t.equal(res.headers.get('location'), `/v1/cdn/purge/${res.body.id}`);
  const second = await send(operator, 'POST', `/v1/cdn/distributions/${endpoint.id}/purge`, { type: 'tag', tags: ['video-42', 'home'] });
  t.equal(second.status, 202, second.text);
  t.match(second.body, { purge_type: 'tag', type: 'tag', tags: ['video-42', 'home'], paths: [] });
  t.ok(second.body.sequence > res.body.sequence, 'the sequence increases');
  const read = await send(viewer, 'GET', `/v1/cdn/purge/${res.body.id}`);
  t.equal(read.status, 200);
  t.same(read.body, res.body);
  const audit = await query<Record<string, any>>(cp, `select * from audit_log where action = 'purge.submitted' and resource_id = ?`, [res.body.id]);
  t.equal(audit.length, 1);
  t.match(audit[0], { actor_id: operator.id, actor_type: 'user', actor_role: 'operator', resource_type: 'purge_request', ip_address: String, request_id: String });
  t.same(audit[0]!.metadata, { distribution_id: endpoint.id, purge_type: 'path', paths: 2, tags: 0, soft: false, sequence: res.body.sequence }, 'the sequence the statement drew is in the entry');
  t.equal(new Date(audit[0]!.created_at).getTime(), Date.parse(res.body.created_at), 'written with the purge, at its time');
});

t.test('soft: true is a soft purge, on both operations and every type; the record and the history say so', async (t) => {
  const one = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'tag', tags: ['show-7'], soft: true });
  t.equal(one.status, 202, one.text);
  t.equal(one.body.soft, true);
  const top = await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'wildcard', paths: ['/vod/*'], soft: true });
  t.equal(top.status, 202, top.text);
  t.equal(top.body.soft, true);
  const hard = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' });
  t.equal(hard.body.soft, false, 'hard by default');
  t.equal((await send(viewer, 'GET', `/v1/cdn/purge/${one.body.id}`)).body.soft, true);
  const rows = await query<{ id: string; soft: boolean }>(cp, `select id, soft from cdn_purge_request where id in (?, ?, ?)`, [one.body.id, top.body.id, hard.body.id]);
  t.same(Object.fromEntries(rows.map((r) => [r.id, r.soft])), { [one.body.id]: true, [top.body.id]: true, [hard.body.id]: false });
  const history = await send(viewer, 'GET', `/v1/cdn/distributions/${endpoint.id}/purge?limit=5`);
  t.equal(history.status, 200, history.text);
  const listed = history.body.data.find((p: { id: string }) => p.id === one.body.id);
  t.equal(listed?.soft, true, 'the history says it was soft');
});

t.test('a purge of an unknown endpoint is a 404 that stores nothing and draws no sequence number', async (t) => {
  const before = await purgeRows();
  const [{ last }] = await query<{ last: string }>(cp, `select last_value::text as last from cdn_purge_sequence`) as [{ last: string }];
  t.equal((await send(operator, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/purge`, { purge_type: 'all' })).status, 404);
  t.same(await purgeRows(), before);
  t.equal((await query<{ last: string }>(cp, `select last_value::text as last from cdn_purge_sequence`))[0]!.last, last);
  const next = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' });
  t.equal(next.body.sequence, Number(last) + 1, 'the next purge takes the next number: no gap');
});

t.test('POST /v1/cdn/cache/purge names its distribution in the body; wildcard globs and purge-all', async (t) => {
  const wildcard = await send(admin, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'wildcard', paths: ['/videos/*', '/img/**/*.jpg', '*'] });
  t.equal(wildcard.status, 202, wildcard.text);
  t.equal(wildcard.body.distribution_id, endpoint.id);
  const all = await send(admin, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' });
  t.equal(all.status, 202, all.text);
  t.same([all.body.paths, all.body.tags], [[], []]);
  t.equal((await send(admin, 'POST', '/v1/cdn/cache/purge', { distribution_id: crypto.randomUUID(), purge_type: 'all' })).status, 404);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/purge`, { purge_type: 'all' })).status, 404);
});

t.test('limits: 500 paths of 2048 characters and 100 tags of 256 are accepted', async (t) => {
  const long = '/' + 'a'.repeat(2047);
  const paths = Array.from({ length: 500 }, (_, i) => (i === 0 ? long : `/p/${i}`));
  t.equal((await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths })).status, 202);
  const tags = Array.from({ length: 100 }, (_, i) => (i === 0 ? 't'.repeat(256) : `tag-${i}`));
  t.equal((await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'tag', tags })).status, 202);
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const path = `/v1/cdn/endpoints/${endpoint.id}/purge`;
  const cases: [string, Record<string, unknown>, string][] = [
    [path, {}, 'purge_type'],
    [path, { purge_type: 'url', paths: ['/a'] }, 'purge_type'],
    [path, { purge_type: 'path', type: 'tag', paths: ['/a'] }, 'type'],
    [path, { purge_type: 'path' }, 'paths'],
    [path, { purge_type: 'wildcard' }, 'paths'],
    [path, { purge_type: 'path', paths: [] }, 'paths'],
    [path, { purge_type: 'path', paths: Array.from({ length: 501 }, (_, i) => `/${i}`) }, 'paths'],
    [path, { purge_type: 'path', paths: ['/' + 'a'.repeat(2048)] }, 'paths[0]'],
    [path, { purge_type: 'path', paths: ['/ok', 'videos/a.mp4'] }, 'paths[1]'],
    [path, { purge_type: 'path', paths: ['https://example.com/a'] }, 'paths[0]'],
    [path, { purge_type: 'path', paths: ['/videos/*'] }, 'paths[0]'],
    [path, { purge_type: 'path', paths: ['/a%2fb'] }, 'paths[0]'],
    [path, { purge_type: 'path', paths: ['/a b'] }, 'paths[0]'],
    [path, { purge_type: 'path', paths: ['/a'], tags: ['x'] }, 'tags'],
    [path, { purge_type: 'path', paths: ['/a'], soft: 'yes' }, 'soft'],
    [path, { purge_type: 'tag', tags: ['x'], soft: 1 }, 'soft'],
    [path, { purge_type: 'all', soft: null }, 'soft'],
    [path, { purge_type: 'wildcard', paths: ['/videos/{a,b'] }, 'paths[0]'],
    [path, { purge_type: 'wildcard', paths: ['videos/*'] }, 'paths[0]'],
    [path, { purge_type: 'tag' }, 'tags'],
    [path, { purge_type: 'tag', tags: [] }, 'tags'],
    [path, { purge_type: 'tag', tags: Array.from({ length: 101 }, (_, i) => `t${i}`) }, 'tags'],
    [path, { purge_type: 'tag', tags: ['t'.repeat(257)] }, 'tags[0]'],
    [path, { purge_type: 'tag', tags: ['a,b'] }, 'tags[0]'],
    [path, { purge_type: 'tag', tags: ['x'], paths: ['/a'] }, 'paths'],
    [path, { purge_type: 'all', paths: ['/a'] }, 'paths'],
    [path, { purge_type: 'all', tags: ['a'] }, 'tags'],
    [path, { purge_type: 'all', scope: 'everything' }, 'scope'],
    [path, { purge_type: 'all', distribution_id: endpoint.id }, 'distribution_id'],
    ['/v1/cdn/cache/purge', { purge_type: 'all', distribution_id: 'nope' }, 'distribution_id'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${endpoint.hostname}/a`, '/b'] }, 'paths[1]'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://user:pw@${endpoint.hostname}/a`] }, 'paths[0]'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${endpoint.hostname}/a#frag`] }, 'paths[0]'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${endpoint.hostname}/a%2fb`] }, 'paths[0]'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: ['https://unknown.example.org/a'] }, 'paths[0]'],
    ['/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${endpoint.hostname}/a`], distribution_id: crypto.randomUUID() }, 'paths[0]'],
    [`/v1/cdn/endpoints/not-a-uuid/purge`, { purge_type: 'all' }, 'id'],
  ];
  const before = await purgeRows();
  for (const [url, body, field] of cases) {
    const res = await send(admin, 'POST', url, body);
    t.equal(res.status, 400, `${JSON.stringify(body).slice(0, 80)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)?.slice(0, 300)}`);
  }
  t.same(await purgeRows(), before, 'nothing stored');
});

t.test('regression: POST /v1/cdn/cache/purge takes the spec\'s input alone: full URLs find their distribution by hostname; with neither, every endpoint', async (t) => {
  // It used to refuse a body without distribution_id.
  const { endpoint: second } = await makeEndpoint(cp, admin);
  const byUrl = await send(operator, 'POST', '/v1/cdn/cache/purge', {
    purge_type: 'path', paths: [`https://${second.hostname}/videos/a.mp4?v=2`, `http://${second.hostname.toUpperCase()}/index.html`],
  });
  t.equal(byUrl.status, 202, byUrl.text);
  t.match(byUrl.body, { distribution_id: second.id, purge_type: 'path', paths: ['/videos/a.mp4?v=2', '/index.html'], status: 'pending' });
  const glob = await send(operator, 'POST', '/v1/cdn/cache/purge', { purge_type: 'wildcard', paths: [`https://${second.hostname}/videos/*`] });
  t.match(glob.body, { distribution_id: second.id, paths: ['/videos/*'] });
  const named = await send(operator, 'POST', '/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${endpoint.hostname}/a`], distribution_id: endpoint.id });
  t.match(named.body, { distribution_id: endpoint.id, paths: ['/a'] });
  const mixed = await send(operator, 'POST', '/v1/cdn/cache/purge', { purge_type: 'path', paths: [`https://${second.hostname}/a`, `https://${endpoint.hostname}/a`] });
  t.equal(mixed.status, 400, 'URLs of two endpoints in one purge');
  t.equal(mixed.body.errors[0].field, 'paths[1]');
  for (const body of [{ purge_type: 'all' }, { purge_type: 'tag', tags: ['promo'] }, { purge_type: 'path', paths: ['/robots.txt'] }]) {
    const everywhere = await send(operator, 'POST', '/v1/cdn/cache/purge', body);
    t.equal(everywhere.status, 202, everywhere.text);
    t.equal(everywhere.body.distribution_id, null, `${body.purge_type} with no distribution and no URL: every endpoint`);
    t.equal((await send(viewer, 'GET', `/v1/cdn/purge/${everywhere.body.id}`)).body.distribution_id, null);
  }
  const [audit] = await query<{ metadata: Record<string, unknown> }>(cp, `select metadata from audit_log where action = 'purge.submitted' order by created_at desc limit 1`);
  t.match(audit!.metadata, { distribution_id: null, purge_type: 'path' });
});

t.test('history: newest first, status and type filters, top level and per distribution; paging', async (t) => {
  const { endpoint: other } = await makeEndpoint(cp, admin);
  const mine = [];
  for (const body of [{ purge_type: 'all' }, { purge_type: 'tag', tags: ['a'] }, { purge_type: 'path', paths: ['/x'] }]) {
    mine.push((await send(operator, 'POST', `/v1/cdn/endpoints/${other.id}/purge`, body)).body);
  }
  const scoped = await send(viewer, 'GET', `/v1/cdn/distributions/${other.id}/purge`);
  t.equal(scoped.status, 200, scoped.text);
  t.same(scoped.body.data.map((p: any) => p.id), mine.map((p) => p.id).reverse(), 'newest first');
  const tagged = await send(viewer, 'GET', `/v1/cdn/distributions/${other.id}/purge?type=tag&status=pending`);
  t.same(tagged.body.data.map((p: any) => p.id), [mine[1].id]);
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${other.id}/purge?status=completed`)).body.data.length, 0);
  const top = await send(viewer, 'GET', '/v1/cdn/purge?limit=2');
  t.equal(top.status, 200);
  t.same(top.body.data.map((p: any) => p.id), [mine[2].id, mine[1].id], 'the top level spans every distribution, newest first');
  const next = await send(viewer, 'GET', `/v1/cdn/purge?limit=2&cursor=${top.body.meta.next_cursor}`);
  t.equal(next.body.data[0].id, mine[0].id);
  t.equal((await send(viewer, 'GET', '/v1/cdn/purge?type=everything')).status, 400);
  t.equal((await send(viewer, 'GET', '/v1/cdn/purge?sort=name')).status, 400);
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${crypto.randomUUID()}/purge`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/purge/${crypto.randomUUID()}`)).status, 404);
});

t.test('roles: operators and admins purge; viewers and subscribers 403; anonymous 401; nothing stored on a refusal', async (t) => {
  const before = await purgeRows();
  for (const who of [viewer, subscriber]) {
    t.equal((await send(who, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })).status, 403);
    t.equal((await send(who, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' })).status, 403);
  }
  t.equal((await send(subscriber, 'GET', '/v1/cdn/purge')).status, 403);
  t.equal((await send(null, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })).status, 401);
  t.same(await purgeRows(), before);
});

t.test('Idempotency-Key: a replay returns the original request; a different body with the key 422', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  const first = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' }, headers);
  t.equal(first.status, 202);
  const before = await purgeRows();
  const replay = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' }, headers);
  t.equal(replay.status, 202);
  t.same(replay.body, first.body);
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  const reused = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'tag', tags: ['x'] }, headers);
  t.equal(reused.status, 422);
  t.equal(reused.body.code, 'IDEMPOTENCY_KEY_REUSED');
  t.same(await purgeRows(), before);
});

t.test('Idempotency-Key is claimed by the purge row: a replay after the purge moved on still answers the original 202; no sequence number is drawn for it', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  const first = await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' }, headers);
  t.equal(first.status, 202, first.text);
  await query(cp, `update cdn_purge_request set status = 'completed', completed_at = now(), updated_at = now() where id = ?`, [first.body.id]);
  const [{ last }] = await query<{ last: string }>(cp, `select last_value::text as last from cdn_purge_sequence`) as [{ last: string }];
  const replay = await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' }, headers);
  t.equal(replay.status, 202);
  t.same(replay.body, first.body, 'as it was answered: pending');
  t.equal(replay.headers.get('location'), `/v1/cdn/purge/${first.body.id}`);
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  t.equal((await query<{ last: string }>(cp, `select last_value::text as last from cdn_purge_sequence`))[0]!.last, last, 'no number drawn');
  const other = await send(admin, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' }, headers);
  t.equal(other.status, 202, 'keys are per caller');
  t.not(other.body.id, first.body.id);
  t.notOk(Object.keys(first.body).some((k) => k.includes('idempotency') || k.includes('fingerprint')), 'the claim is not part of the record');
  t.notOk(Object.keys((await send(viewer, 'GET', `/v1/cdn/purge/${first.body.id}`)).body).some((k) => k.includes('idempotency') || k.includes('fingerprint')));
});

t.test('Idempotency-Key: concurrent duplicates store one purge, one audit entry, and all answer it', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  const before = await purgeRows();
  const results = await Promise.all(Array.from({ length: 6 }, () => send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' }, headers)));
  t.same(results.map((r) => r.status), [202, 202, 202, 202, 202, 202]);
  t.equal(new Set(results.map((r) => r.body.id)).size, 1, 'one purge');
  t.equal(results.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 5);
  const after = await purgeRows();
  t.equal(after.purges.length, before.purges.length + 1);
  t.equal(after.audit, before.audit + 1);
});

t.test('Idempotency-Key: a 404 is not recorded under the key, and a claim older than 24 hours is released', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  t.equal((await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: crypto.randomUUID(), purge_type: 'all' }, headers)).status, 404);
  const first = await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' }, headers);
  t.equal(first.status, 202, 'the corrected request with the key runs');
  t.equal(first.headers.get('idempotent-replayed'), null);
  await query(cp, `update cdn_purge_request set created_at = created_at - interval '25 hours' where id = ?`, [first.body.id]);
  const again = await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'tag', tags: ['x'] }, headers);
  t.equal(again.status, 202, again.text);
  t.not(again.body.id, first.body.id, 'a new purge');
  t.equal((await query(cp, `select 1 from cdn_purge_request where id = ? and idempotency_key is null`, [first.body.id])).length, 1, 'the old purge let the key go');
});

t.test(`each caller may submit ${PURGES_PER_MINUTE} purges a minute, then 429 with Retry-After; others are not affected`, async (t) => {
  const busy = await createLoggedInUser(cp, { roles: ['operator'] });
  for (let i = 0; i < PURGES_PER_MINUTE; i++) await cp.app.store.incrWindow(`rl:cdn-purge:user:${busy.id}`, 60_000);
  const before = await purgeRows();
  const limited = await send(busy, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' });
  t.equal(limited.status, 429);
  t.ok(limited.headers.get('retry-after'));
  t.same(await purgeRows(), before);
  t.equal((await send(operator, 'POST', '/v1/cdn/cache/purge', { distribution_id: endpoint.id, purge_type: 'all' })).status, 202);
});

t.test('concurrent submissions get distinct, increasing sequence numbers', async (t) => {
  const results = await Promise.all(Array.from({ length: 8 }, () => send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })));
  const sequences = results.map((r) => r.body.sequence);
  t.equal(new Set(sequences).size, 8);
  const stored = await query<{ sequence: string }>(cp, `select sequence from cdn_purge_request order by created_at, sequence`);
  t.equal(stored.length, new Set(stored.map((r) => r.sequence)).size);
});

t.test('deleting the endpoint removes its purge history', async (t) => {
  const { endpoint: gone } = await makeEndpoint(cp, admin);
  await send(operator, 'POST', `/v1/cdn/endpoints/${gone.id}/purge`, { purge_type: 'all' });
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${gone.id}`)).status, 204);
  t.equal((await query(cp, `select 1 from cdn_purge_request where distribution_id = ?`, [gone.id])).length, 0);
});
