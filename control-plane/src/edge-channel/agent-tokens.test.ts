// Edge agent tokens through the real server on PostgreSQL and Redis: create
// shows the value once, reads, lists, the audit trail and the log never;
// superadmins only; bad input changes nothing; the verifier the control
// channel uses accepts only active, unexpired tokens; revoke, rotate and
// expiry announce the token on AGENT_TOKEN_REVOKED_CHANNEL so every replica
// closes its streams.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  countRows, createAdmin, createLoggedInUser, createSuperadmin, query, RELAXED_LIMITS, sender, type Caller,
} from '../../../test/support/auth.ts';
import { collectingLogger } from '../../../test/support/cdn-policies.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { generateAgentToken, hashToken } from '../tokens/opaque-tokens.ts';
import { agentTokenExpirySweepJob } from './agent-token-jobs.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL } from './contracts.ts';

const { log, lines } = collectingLogger();
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, log });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
const operator = await createLoggedInUser(cp, { roles: ['operator', 'subscriber'] });
const viewer = await createLoggedInUser(cp, { roles: ['viewer', 'subscriber'] });
const subscriber = await createLoggedInUser(cp);
const send = sender(cp);
const verifier = cp.app.edgeAgentTokens;

/** Every value issued in this file: none may ever show up outside the one answer that issued it. */
const issuedValues: string[] = [];

/** The messages on the revocation channel (through the server's own store: its Redis key prefix). */
const announced: string[] = [];
const unsubscribe = await cp.app.store.subscribe(AGENT_TOKEN_REVOKED_CHANNEL, (message) => { announced.push(message); });
t.teardown(unsubscribe);
const announcedIds = () => announced.map((m) => (JSON.parse(m) as { id: string }).id);

let sequence = 0;
async function createToken(json: Record<string, unknown> = {}, who: Caller = superadmin): Promise<Record<string, any> & { id: string; token: string }> {
  const res = await send(who, 'POST', '/v1/cdn/agent-tokens', { name: `edge-${++sequence}`, ...json });
  if (res.status !== 201) throw new Error(`create agent token: ${res.status} ${res.text}`);
  issuedValues.push(res.body.token);
  return res.body;
}

const tokenRow = async (id: string) => (await query<Record<string, any>>(cp, 'select * from cdn_agent_token where id = ?', [id]))[0];
const auditOf = (id: string) => query<{ action: string; actor_id: string; actor_type: string; actor_role: string; metadata: Record<string, any> }>(
  cp, 'select action, actor_id, actor_type, actor_role, metadata from audit_log where resource_id = ? order by created_at', [id]);
/** Everything a refused request must leave as it was. */
const state = async () => ({
  tokens: await query(cp, 'select * from cdn_agent_token order by id'),
  audit: await countRows(cp, 'audit_log'),
});

t.test('POST /v1/cdn/agent-tokens issues a token: 201 bare record with the value once, Location, ETag; only a hash stored; audit-logged without the value', async (t) => {
  const expires = new Date(Date.now() + 30 * 86_400_000).toISOString();
  const res = await send(superadmin, 'POST', '/v1/cdn/agent-tokens', { name: 'edge-fra-1', description: 'Frankfurt rack 2', expires_at: expires });
  t.equal(res.status, 201, res.text);
  const body = res.body;
  issuedValues.push(body.token);
  t.match(body.token, /^agt_[A-Za-z0-9_-]{43}$/);
  t.match(body, {
    name: 'edge-fra-1', description: 'Frankfurt rack 2', status: 'active', expires_at: expires, last_used_at: null, revoked_at: null,
    created_by: superadmin.id, replaced_by: null, token_hint: `${body.token.slice(0, 8)}…`,
  });
  t.notOk('data' in body, 'CDN single records are bare');
  t.notOk('token_hash' in body);
  t.equal(res.headers.get('location'), `/v1/cdn/agent-tokens/${body.id}`);
  t.ok(res.headers.get('etag'));

  const row = await tokenRow(body.id);
  t.equal(row!.token_hash, hashToken(body.token, cp.app.tokenPepper), 'the keyed hash is stored');
  t.notOk(JSON.stringify(row).includes(body.token.slice(4)), 'the value is not stored');
  const [entry] = await auditOf(body.id);
  t.match(entry, { action: 'agent_token.created', actor_id: superadmin.id, actor_type: 'user', actor_role: 'superadmin' });
  t.match(entry!.metadata.changes, { name: { to: 'edge-fra-1' }, description: { to: 'Frankfurt rack 2' }, status: { to: 'active' }, expires_at: { to: expires } });
  t.notOk(JSON.stringify(entry).includes(body.token.slice(4)), 'the value is not in the audit entry');

  t.equal((await verifier.verify(body.token))?.id, body.id, 'the issued value verifies');
});

t.test('description and expires_at may be omitted or null', async (t) => {
  const plain = await createToken();
  t.equal(plain.description, null);
  t.equal(plain.expires_at, null);
  const nulls = await createToken({ description: null, expires_at: null });
  t.equal(nulls.description, null);
  t.equal(nulls.expires_at, null);
});

t.test('GET /v1/cdn/agent-tokens/{id} reads the token without its value; unknown 404, malformed id 400', async (t) => {
  const created = await createToken();
  const res = await send(superadmin, 'GET', `/v1/cdn/agent-tokens/${created.id}`);
  t.equal(res.status, 200);
  t.notOk('token' in res.body);
  t.notOk('token_hash' in res.body);
  t.notOk(res.text.includes(created.token.slice(4)));
  t.match(res.body, { id: created.id, name: created.name, status: 'active', token_hint: created.token_hint });
  t.equal((await send(superadmin, 'GET', `/v1/cdn/agent-tokens/${crypto.randomUUID()}`)).status, 404);
  const bad = await send(superadmin, 'GET', '/v1/cdn/agent-tokens/not-a-uuid');
  t.equal(bad.status, 400);
  t.equal(bad.body.errors[0].field, 'token_id');
});

t.test('GET /v1/cdn/agent-tokens lists without values, newest first, pages with cursors, filters by status and sorts by name', async (t) => {
  const made = [await createToken({ name: 'list-c' }), await createToken({ name: 'list-a' }), await createToken({ name: 'list-b' })];
  const all = await send(superadmin, 'GET', '/v1/cdn/agent-tokens?limit=100');
  t.equal(all.status, 200);
  for (const token of made) t.notOk(all.text.includes(token.token.slice(4)), 'no value in the list');
  t.notOk(all.text.includes('token_hash'));
  t.notOk(all.body.data.some((r: any) => 'token' in r));
  const times = all.body.data.map((r: any) => r.created_at);
  t.same(times, [...times].sort().reverse(), 'newest first');
  t.equal(all.body.meta.total, all.body.data.length);

  const first = await send(superadmin, 'GET', '/v1/cdn/agent-tokens?limit=2');
  t.equal(first.body.data.length, 2);
  t.equal(first.body.meta.has_more, true);
  const second = await send(superadmin, 'GET', `/v1/cdn/agent-tokens?limit=2&cursor=${first.body.meta.next_cursor}`);
  t.equal(second.status, 200);
  t.notOk(second.body.data.some((r: any) => first.body.data.some((f: any) => f.id === r.id)), 'pages do not overlap');

  const names = (await send(superadmin, 'GET', '/v1/cdn/agent-tokens?sort=name&limit=100')).body.data.map((r: any) => r.name);
  t.same(names, [...names].sort());

  t.equal((await send(superadmin, 'DELETE', `/v1/cdn/agent-tokens/${made[0]!.id}`)).status, 204);
  const revoked = await send(superadmin, 'GET', '/v1/cdn/agent-tokens?status=revoked&limit=100');
  t.ok(revoked.body.data.every((r: any) => r.status === 'revoked'));
  t.ok(revoked.body.data.some((r: any) => r.id === made[0]!.id));
  const active = await send(superadmin, 'GET', '/v1/cdn/agent-tokens?status=active&limit=100');
  t.notOk(active.body.data.some((r: any) => r.id === made[0]!.id));
});

t.test('bad input is a 400 naming the field, and nothing is stored', async (t) => {
  const token = await createToken();
  const before = await state();
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'name'],
    [{ name: '' }, 'name'],
    [{ name: '   ' }, 'name'],
    [{ name: 'x'.repeat(101) }, 'name'],
    [{ name: 'two\nlines' }, 'name'],
    [{ name: 42 }, 'name'],
    [{ name: 'ok', description: 'd'.repeat(501) }, 'description'],
    [{ name: 'ok', description: 'nul\u0000byte' }, 'description'],
    [{ name: 'ok', description: ['list'] }, 'description'],
    [{ name: 'ok', expires_at: '2001-01-01T00:00:00Z' }, 'expires_at'],
    [{ name: 'ok', expires_at: new Date(Date.now() - 1000).toISOString() }, 'expires_at'],
    [{ name: 'ok', expires_at: 'tomorrow' }, 'expires_at'],
    [{ name: 'ok', expires_at: '0000-01-01T00:00:00Z' }, 'expires_at'],
    [{ name: 'ok', expires_at: 1_900_000_000 }, 'expires_at'],
    [{ name: 'ok', token: generateAgentToken() }, 'token'],
    [{ name: 'ok', status: 'revoked' }, 'status'],
  ];
  for (const [json, field] of cases) {
    const res = await send(superadmin, 'POST', '/v1/cdn/agent-tokens', json);
    t.equal(res.status, 400, `${JSON.stringify(json)} → 400`);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors.some((e: any) => e.field === field), `${JSON.stringify(json)} names ${field}: ${res.text}`);
  }
  const notJson = await cp.request('POST', '/v1/cdn/agent-tokens', { headers: { authorization: `Bearer ${superadmin.accessToken}`, 'content-type': 'application/json' }, body: '{"name":' });
  t.equal(notJson.status, 400);

  for (const path of ['/v1/cdn/agent-tokens?status=expired', '/v1/cdn/agent-tokens?limit=0', '/v1/cdn/agent-tokens?limit=101',
    '/v1/cdn/agent-tokens?sort=token_hash', '/v1/cdn/agent-tokens?cursor=abc', '/v1/cdn/agent-tokens?role=admin']) {
    t.equal((await send(superadmin, 'GET', path)).status, 400, path);
  }
  t.equal((await send(superadmin, 'DELETE', '/v1/cdn/agent-tokens/not-a-uuid')).status, 400);
  t.equal((await send(superadmin, 'POST', `/v1/cdn/agent-tokens/${token.id}/rotate`, { name: 'renamed' })).status, 400, 'rotate takes no body');
  t.same(await state(), before, 'no token stored, changed or revoked; no audit entry');
});

t.test('superadmins only: admin, operator, viewer and subscriber get 403 on every operation, anonymous 401, and nothing changes', async (t) => {
  const token = await createToken();
  const before = await state();
  for (const who of [admin, operator, viewer, subscriber]) {
    t.equal((await send(who, 'GET', '/v1/cdn/agent-tokens')).status, 403);
    t.equal((await send(who, 'GET', `/v1/cdn/agent-tokens/${token.id}`)).status, 403);
    t.equal((await send(who, 'POST', '/v1/cdn/agent-tokens', { name: 'x' })).status, 403);
    t.equal((await send(who, 'DELETE', `/v1/cdn/agent-tokens/${token.id}`)).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/agent-tokens/${token.id}/rotate`)).status, 403);
  }
  t.equal((await send(null, 'GET', '/v1/cdn/agent-tokens')).status, 401);
  t.equal((await send(null, 'POST', '/v1/cdn/agent-tokens', { name: 'x' })).status, 401);
  t.same(await state(), before);
  t.equal((await verifier.verify(token.token))?.id, token.id, 'still active');
});

t.test('API tokens of every role get 403 (they never carry superadmin); an agent token is no HTTP credential (401)', async (t) => {
  const token = await createToken();
  const apiTokens: string[] = [];
  for (const role of ['viewer', 'operator', 'admin']) {
    const res = await send(admin, 'POST', '/v1/cdn/api-tokens', { name: `agent-token-probe-${role}`, role });
    t.equal(res.status, 201);
    apiTokens.push(res.body.token);
  }
  const before = await state();
  for (const value of apiTokens) {
    t.equal((await send(value, 'GET', '/v1/cdn/agent-tokens')).status, 403);
    t.equal((await send(value, 'GET', `/v1/cdn/agent-tokens/${token.id}`)).status, 403);
    t.equal((await send(value, 'POST', '/v1/cdn/agent-tokens', { name: 'x' })).status, 403);
    t.equal((await send(value, 'DELETE', `/v1/cdn/agent-tokens/${token.id}`)).status, 403);
    t.equal((await send(value, 'POST', `/v1/cdn/agent-tokens/${token.id}/rotate`)).status, 403);
    t.equal(await verifier.verify(value), null, 'an API token is no agent token');
  }
  t.equal((await send(token.token, 'GET', '/v1/cdn/agent-tokens')).status, 401);
  t.equal((await send(token.token, 'GET', '/v1/cdn/endpoints')).status, 401);
  t.same(await state(), before);
});

t.test('verify: an active token gives its id and records last_used_at; revoked, expired, unknown and malformed values are null', async (t) => {
  const token = await createToken();
  t.equal((await tokenRow(token.id))!.last_used_at, null);
  t.same(await verifier.verify(token.token), { id: token.id });
  const used = (await tokenRow(token.id))!;
  t.ok(used.last_used_at, 'last_used_at set on verify');
  const read = await send(superadmin, 'GET', `/v1/cdn/agent-tokens/${token.id}`);
  t.equal(read.body.last_used_at, new Date(used.last_used_at).toISOString());

  const refused = {
    empty: '', 'bare prefix': 'agt_', short: 'agt_short', 'one character more': `${token.token}x`, 'one character less': token.token.slice(0, -1),
    'leading space': ` ${token.token}`, 'with the scheme': `Bearer ${token.token}`, 'other case': token.token.toUpperCase(),
    'API token prefix': `cdn_${token.token.slice(4)}`, unknown: generateAgentToken(), huge: 'x'.repeat(10_000),
  };
  for (const [what, value] of Object.entries(refused)) t.equal(await verifier.verify(value), null, `refused: ${what}`);

  const expiring = await createToken({ expires_at: new Date(Date.now() + 3_600_000).toISOString() });
  t.same(await verifier.verify(expiring.token), { id: expiring.id }, 'valid before its expiry');
  await query(cp, `update cdn_agent_token set expires_at = now() - interval '1 second' where id = ?`, [expiring.id]);
  t.equal(await verifier.verify(expiring.token), null, 'refused past its expiry');
  t.equal((await tokenRow(expiring.id))!.status, 'active', 'expiry does not change the status');

  const revoked = await createToken();
  t.equal((await send(superadmin, 'DELETE', `/v1/cdn/agent-tokens/${revoked.id}`)).status, 204);
  t.equal(await verifier.verify(revoked.token), null, 'refused once revoked');
});

t.test('verify records last_used_at at most once a minute: streams of one token opening by the thousand do not each write its row', async (t) => {
  const token = await createToken();
  t.same(await verifier.verify(token.token), { id: token.id });
  const first = (await tokenRow(token.id))!;
  const results = await Promise.all(Array.from({ length: 20 }, () => verifier.verify(token.token)));
  t.ok(results.every((r) => r?.id === token.id), 'every open verified');
  const after = (await tokenRow(token.id))!;
  t.same([after.last_used_at, after.version], [first.last_used_at, first.version], 'within the minute: not written again');
  await query(cp, `update cdn_agent_token set last_used_at = now() - interval '61 seconds' where id = ?`, [token.id]);
  t.same(await verifier.verify(token.token), { id: token.id });
  const later = (await tokenRow(token.id))!;
  t.ok(new Date(later.last_used_at).getTime() > Date.now() - 60_000, 'a minute later: written');
  t.ok(later.version > first.version, 'with the version');
  await query(cp, `update cdn_agent_token set status = 'revoked', revoked_at = now() where id = ?`, [token.id]);
  t.equal(await verifier.verify(token.token), null, 'a revoked token within the minute is refused all the same');
});

t.test('DELETE /v1/cdn/agent-tokens/{id} revokes at once: 204, announced on the revocation channel, refused by the verifier; a second revoke 409; audit-logged', async (t) => {
  const token = await createToken();
  t.same(await verifier.verify(token.token), { id: token.id });
  const res = await send(superadmin, 'DELETE', `/v1/cdn/agent-tokens/${token.id}`);
  t.equal(res.status, 204);
  t.equal(res.text, '');
  await eventually(() => announcedIds().includes(token.id), 'the revocation is announced');
  t.same(JSON.parse(announced.find((m) => m.includes(token.id))!), { id: token.id }, 'the message is {"id": ...} and nothing else');
  t.equal(await verifier.verify(token.token), null);
  const row = (await tokenRow(token.id))!;
  t.equal(row.status, 'revoked');
  t.ok(row.revoked_at);

  const before = await state();
  const again = await send(superadmin, 'DELETE', `/v1/cdn/agent-tokens/${token.id}`);
  t.equal(again.status, 409);
  t.equal(again.body.code, 'CONFLICT');
  t.equal((await send(superadmin, 'DELETE', `/v1/cdn/agent-tokens/${crypto.randomUUID()}`)).status, 404);
  t.same(await state(), before, 'refused revokes change nothing');
  t.same((await auditOf(token.id)).map((e) => e.action), ['agent_token.created', 'agent_token.revoked']);
  t.equal(announcedIds().filter((id) => id === token.id).length, 1, 'announced once');
});

t.test('POST /v1/cdn/agent-tokens/{id}/rotate: the old token revoked and announced, a new one issued once with the same name, description and expiry', async (t) => {
  const expires = new Date(Date.now() + 7 * 86_400_000).toISOString();
  const old = await createToken({ name: 'edge-rot', description: 'to rotate', expires_at: expires });
  const res = await send(superadmin, 'POST', `/v1/cdn/agent-tokens/${old.id}/rotate`);
  t.equal(res.status, 200, res.text);
  issuedValues.push(res.body.token);
  t.match(res.body, { name: 'edge-rot', description: 'to rotate', expires_at: expires, status: 'active', created_by: superadmin.id });
  t.match(res.body.token, /^agt_[A-Za-z0-9_-]{43}$/);
  t.not(res.body.id, old.id);
  await eventually(() => announcedIds().includes(old.id), 'the rotated token is announced');
  t.equal(await verifier.verify(old.token), null);
  t.same(await verifier.verify(res.body.token), { id: res.body.id });
  t.match(await tokenRow(old.id), { status: 'revoked', replaced_by: res.body.id });
  t.same((await auditOf(old.id)).map((e) => e.action), ['agent_token.created', 'agent_token.rotated']);
  t.match((await auditOf(res.body.id))[0], { action: 'agent_token.created', metadata: { rotated_from: old.id } });

  const before = await state();
  t.equal((await send(superadmin, 'POST', `/v1/cdn/agent-tokens/${old.id}/rotate`)).status, 409, 'a revoked token cannot be rotated');
  t.same(await state(), before);
  const expired = await createToken({ expires_at: new Date(Date.now() + 3_600_000).toISOString() });
  await query(cp, `update cdn_agent_token set expires_at = now() - interval '1 second' where id = ?`, [expired.id]);
  const beforeExpired = await state();
  t.equal((await send(superadmin, 'POST', `/v1/cdn/agent-tokens/${expired.id}/rotate`)).status, 409, 'an expired token cannot be rotated');
  t.same(await state(), beforeExpired);
  t.equal((await send(superadmin, 'POST', `/v1/cdn/agent-tokens/${crypto.randomUUID()}/rotate`)).status, 404);
});

t.test('the expiry sweep announces each expired token once, so its open streams close too', async (t) => {
  const expiring = await createToken({ expires_at: new Date(Date.now() + 3_600_000).toISOString() });
  const lasting = await createToken({ expires_at: new Date(Date.now() + 3_600_000).toISOString() });
  await query(cp, `update cdn_agent_token set expires_at = now() - interval '1 second' where id = ?`, [expiring.id]);
  await cp.app.jobs.enqueue(agentTokenExpirySweepJob, {});
  await cp.app.jobs.runDue();
  await eventually(() => announcedIds().includes(expiring.id), 'the expired token is announced');
  t.notOk(announcedIds().includes(lasting.id), 'a token not yet expired is not');
  t.ok((await tokenRow(expiring.id))!.expiry_announced_at, 'marked as announced');
  const [job] = await query<{ state: string }>(cp, `select state from job where type = ? order by created_at desc limit 1`, [agentTokenExpirySweepJob.type]);
  t.equal(job!.state, 'succeeded');

  await cp.app.jobs.enqueue(agentTokenExpirySweepJob, {});
  await cp.app.jobs.runDue();
  t.equal(announcedIds().filter((id) => id === expiring.id).length, 1, 'not announced twice');
});

t.test('no value issued in this file ever reaches the log, the audit trail or a stored row', async (t) => {
  t.ok(issuedValues.length > 10);
  t.ok(lines.length > 0, 'the log was written');
  const log = lines.join('\n');
  const audit = JSON.stringify(await query(cp, 'select * from audit_log'));
  const rows = JSON.stringify(await query(cp, 'select * from cdn_agent_token'));
  for (const value of issuedValues) {
    const secret = value.slice(4);
    t.notOk(log.includes(secret), 'not in the log');
    t.notOk(audit.includes(secret), 'not in the audit trail');
    t.notOk(rows.includes(secret), 'not stored');
  }
});
