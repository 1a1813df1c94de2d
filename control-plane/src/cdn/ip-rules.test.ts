// IP access rules through the real server (document 3 §2, §4.9): create with
// defaults and canonical ranges, 400 for bad input and host bits, 409 for a
// repeated range, update without cidr, If-Match, delete, lists in evaluation
// order with the action filter, distribution aliases, roles, idempotency.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { policiesState } from '../../../test/support/cdn-policies.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint } = await makeEndpoint(cp, admin);
const base = `/v1/cdn/endpoints/${endpoint.id}/ip-rules`;

let octet = 0;
async function makeRule(body: Record<string, unknown> = {}, path = base) {
  const res = await send(admin, 'POST', path, { action: 'block', cidr: `198.51.${++octet}.0/24`, ...body });
  if (res.status !== 201) throw new Error(`create rule: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

t.test('POST /v1/cdn/endpoints/{id}/ip-rules: 201 bare with defaults, Location, ETag, audit-logged', async (t) => {
  const res = await send(admin, 'POST', base, { action: 'allow', cidr: '203.0.113.0/24' });
  t.equal(res.status, 201, res.text);
  t.equal(res.headers.get('location'), `${base}/${res.body.id}`);
  t.ok(res.headers.get('etag'));
  t.same(res.body, {
    id: res.body.id, endpoint_id: endpoint.id, action: 'allow', cidr: '203.0.113.0/24', description: null, priority: 100,
    created_at: res.body.created_at, updated_at: res.body.updated_at,
  });
  const [audit] = await query<{ actor_id: string }>(cp, `select actor_id from audit_log where action = 'ip_rule.created' and resource_id = ?`, [res.body.id]);
  t.equal(audit?.actor_id, admin.id);
});

t.test('cidr is stored in its canonical form (IPv4 and IPv6, bare addresses, IPv4-mapped ranges)', async (t) => {
  const cases: [string, string][] = [
    ['192.0.2.7', '192.0.2.7/32'], ['2001:DB8:0:0:0:0:0:0/32', '2001:db8::/32'], ['2001:db8::1', '2001:db8::1/128'],
    ['::ffff:10.0.0.0/104', '10.0.0.0/8'], ['0.0.0.0/0', '0.0.0.0/0'], ['::/0', '::/0'], [' 100.64.0.0/10 ', '100.64.0.0/10'],
  ];
  for (const [input, stored] of cases) {
    const res = await send(admin, 'POST', base, { action: 'challenge', cidr: input, priority: 1, description: 'canonical' });
    t.equal(res.status, 201, `${input}: ${res.text}`);
    t.equal(res.body.cidr, stored, `${input} → ${stored}`);
  }
});

t.test('bad input is refused with 400 naming the field (types, enums, limits), storing nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{ cidr: '10.0.0.0/8' }, 'action'],
    [{ action: 'allow' }, 'cidr'],
    [{ action: 'deny', cidr: '10.0.0.0/8' }, 'action'],
    [{ action: 'allow', cidr: 42 }, 'cidr'],
    [{ action: 'allow', cidr: `10.0.0.0/${'8'.repeat(70)}` }, 'cidr'],
    [{ action: 'allow', cidr: '10.0.0.0/8', priority: 0 }, 'priority'],
    [{ action: 'allow', cidr: '10.0.0.0/8', priority: 1001 }, 'priority'],
    [{ action: 'allow', cidr: '10.0.0.0/8', priority: 1.5 }, 'priority'],
    [{ action: 'allow', cidr: '10.0.0.0/8', description: 'x'.repeat(256) }, 'description'],
    [{ action: 'allow', cidr: '10.0.0.0/8', enabled: true }, 'enabled'],
  ];
  const before = await policiesState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, body);
    t.equal(res.status, 400, `${JSON.stringify(body)} → 400`);
    t.ok(res.body.errors?.find((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await policiesState(cp), before, 'nothing stored');
});

t.test('a range the edge cannot use is refused with 422 INVALID_CONFIGURATION naming cidr (the edge\'s own check), storing nothing', async (t) => {
  const cases: [string, RegExp?][] = [
    ['10.0.0.5/8', /10\.0\.0\.0\/8/], ['2001:db8::1/32', /2001:db8::\/32/], ['10.0.0.0/33'], ['2001:db8::/129'], ['10.0.0/8'], ['010.0.0.1'],
    ['0x7f.1'], ['fe80::1%eth0'], ['example.com'], ['10.0.0.0/8/8'], [''], ['10.0.0.0/'], ['1.2.3.4/08x'],
  ];
  const before = await policiesState(cp);
  for (const [cidr, message] of cases) {
    const res = await send(admin, 'POST', base, { action: 'block', cidr });
    t.equal(res.status, 422, `${JSON.stringify(cidr)} → 422`);
    t.equal(res.body.code, 'INVALID_CONFIGURATION');
    const error = res.body.errors?.find((e: { field: string }) => e.field === 'cidr');
    t.ok(error, `names cidr: ${JSON.stringify(res.body.errors)}`);
    if (message) t.match(error?.message, message, 'names the network meant');
  }
  t.same(await policiesState(cp), before, 'nothing stored');
});

t.test('ip_default_action: deny needs a rule that admits someone; that rule\'s deletion (409) or change to block (422) is refused while it is the last', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const rules = `/v1/cdn/endpoints/${e.id}/ip-rules`;
  t.equal(e.ip_default_action, 'allow', 'allow by default');
  const free = (await send(admin, 'POST', '/v1/cdn/origins', { name: 'free origin for deny', host: '93.184.216.11' })).body;
  const before = await policiesState(cp);
  const refused = await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { ip_default_action: 'deny' });
  t.equal(refused.status, 422);
  t.equal(refused.body.errors[0].field, 'ip_default_action');
  const onCreate = await send(admin, 'POST', '/v1/cdn/endpoints', { name: 'deny at birth', default_origin_id: free.id, ip_default_action: 'deny' });
  t.equal(onCreate.status, 422, 'a new endpoint has no rules yet');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { ip_default_action: 'never' })).status, 400);
  t.same(await policiesState(cp), before, 'nothing changed');
  await send(admin, 'POST', rules, { action: 'block', cidr: '198.51.100.0/24' });
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { ip_default_action: 'deny' })).status, 422, 'a block rule admits nobody');
  const office = (await send(admin, 'POST', rules, { action: 'allow', cidr: '203.0.113.0/24' })).body;
  const deny = await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { ip_default_action: 'deny' });
  t.equal(deny.status, 200, deny.text);
  t.equal(deny.body.ip_default_action, 'deny');
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${e.id}`)).body.ip_default_action, 'deny');
  const [audit] = await query<{ metadata: { changes: Record<string, unknown> } }>(cp,
    `select metadata from audit_log where action = 'endpoint.updated' and resource_id = ? order by created_at desc limit 1`, [e.id]);
  t.same(Object.keys(audit!.metadata.changes), ['ip_default_action'], 'audit-logged');

  const kept = await policiesState(cp);
  const del = await send(admin, 'DELETE', `${rules}/${office.id}`);
  t.equal(del.status, 409);
  t.equal(del.body.code, 'RESOURCE_IN_USE');
  const toBlock = await send(admin, 'PATCH', `${rules}/${office.id}`, { action: 'block' });
  t.equal(toBlock.status, 422);
  t.equal(toBlock.body.errors[0].field, 'action');
  t.same(await policiesState(cp), kept, 'nothing changed');
  t.equal((await send(admin, 'PATCH', `${rules}/${office.id}`, { action: 'challenge' })).status, 200, 'a challenge rule admits browsers');
  const second = (await send(admin, 'POST', rules, { action: 'allow', cidr: '192.0.2.0/24' })).body;
  t.equal((await send(admin, 'DELETE', `${rules}/${office.id}`)).status, 204, 'not the last one any more');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { ip_default_action: 'allow' })).status, 200);
  t.equal((await send(admin, 'DELETE', `${rules}/${second.id}`)).status, 204, 'allowing by default, any rule may go');
});

t.test('a second rule for the same range (in any spelling) is 409 CONFLICT; another endpoint may have it', async (t) => {
  await makeRule({ cidr: '192.0.2.128/25' });
  const before = await policiesState(cp);
  for (const cidr of ['192.0.2.128/25', '::ffff:192.0.2.128/121']) {
    const res = await send(admin, 'POST', base, { action: 'allow', cidr });
    t.equal(res.status, 409, cidr);
    t.equal(res.body.code, 'CONFLICT');
  }
  t.same(await policiesState(cp), before, 'nothing stored');
  const other = await makeEndpoint(cp, admin);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${other.endpoint.id}/ip-rules`, { action: 'allow', cidr: '192.0.2.128/25' })).status, 201);
});

t.test('PATCH: action, description and priority change; cidr cannot (400 naming cidr); If-Match 412; audit-logged', async (t) => {
  const rule = await makeRule({ description: 'office' });
  const read = await send(viewer, 'GET', `${base}/${rule.id}`);
  const etag = read.headers.get('etag')!;
  const res = await send(admin, 'PATCH', `${base}/${rule.id}`, { action: 'challenge', priority: 5 }, { 'if-match': etag });
  t.equal(res.status, 200, res.text);
  t.match(res.body, { action: 'challenge', priority: 5, description: 'office', cidr: rule.cidr });
  t.equal((await send(admin, 'PATCH', `${base}/${rule.id}`, { description: null })).body.description, null);
  const before = await policiesState(cp);
  const cidr = await send(admin, 'PATCH', `${base}/${rule.id}`, { cidr: '10.0.0.0/8' });
  t.equal(cidr.status, 400);
  t.equal(cidr.body.errors[0].field, 'cidr');
  t.equal((await send(admin, 'PATCH', `${base}/${rule.id}`, { priority: 0 })).status, 400);
  t.equal((await send(admin, 'PATCH', `${base}/${rule.id}`, { action: 'block' }, { 'if-match': etag })).status, 412);
  t.same(await policiesState(cp), before, 'nothing changed');
  const [audit] = await query<{ metadata: { changes: Record<string, unknown> } }>(cp,
    `select metadata from audit_log where action = 'ip_rule.updated' and resource_id = ? order by created_at limit 1`, [rule.id]);
  t.same(Object.keys(audit!.metadata.changes).sort(), ['action', 'priority']);
});

t.test('read and delete answer 404 for a rule of another endpoint; delete is audit-logged', async (t) => {
  const rule = await makeRule();
  const other = await makeEndpoint(cp, admin);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${other.endpoint.id}/ip-rules/${rule.id}`)).status, 404);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${other.endpoint.id}/ip-rules/${rule.id}`)).status, 404);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${other.endpoint.id}/ip-rules/${rule.id}`, { priority: 3 })).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${crypto.randomUUID()}/ip-rules`)).status, 404);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/ip-rules`, { action: 'allow', cidr: '10.0.0.0/8' })).status, 404);
  t.equal((await send(admin, 'DELETE', `${base}/${rule.id}`)).status, 204);
  t.equal((await send(viewer, 'GET', `${base}/${rule.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'ip_rule.deleted' and resource_id = ?`, [rule.id])).length, 1);
});

t.test('lists are in evaluation order with the action filter; distribution aliases list and create the same rules', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const own = `/v1/cdn/endpoints/${e.id}/ip-rules`;
  const alias = `/v1/cdn/distributions/${e.id}/ip-rules`;
  await makeRule({ priority: 30, action: 'allow' }, own);
  await makeRule({ priority: 10 }, own);
  const viaAlias = await makeRule({ priority: 20 }, alias);
  t.equal(viaAlias.endpoint_id, e.id);
  for (const path of [own, alias]) {
    const list = await send(viewer, 'GET', path);
    t.same(list.body.data.map((r: { priority: number }) => r.priority), [10, 20, 30], path);
    t.equal(list.body.meta.total, 3);
  }
  const blocks = await send(viewer, 'GET', `${own}?action=block&limit=1`);
  t.same(blocks.body.data.map((r: { priority: number }) => r.priority), [10]);
  t.match(blocks.body.meta, { total: 2, has_more: true });
  const rest = await send(viewer, 'GET', `${own}?action=block&limit=1&cursor=${encodeURIComponent(blocks.body.meta.next_cursor)}`);
  t.same(rest.body.data.map((r: { priority: number }) => r.priority), [20]);
  for (const bad of ['action=deny', 'limit=101', 'sort=priority', 'q=x']) t.equal((await send(viewer, 'GET', `${own}?${bad}`)).status, 400, bad);
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${crypto.randomUUID()}/ip-rules`)).status, 404);
});

t.test('deleting the endpoint removes its rules', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  await makeRule({}, `/v1/cdn/endpoints/${e.id}/ip-rules`);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${e.id}`)).status, 204);
  t.equal((await query(cp, 'select 1 from cdn_ip_rule where endpoint_id = ?', [e.id])).length, 0);
});

t.test('roles: viewers and operators read but cannot write (403, nothing changes); subscribers and anonymous callers get nothing', async (t) => {
  const rule = await makeRule();
  const before = await policiesState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', base)).status, 200);
    t.equal((await send(who, 'GET', `${base}/${rule.id}`)).status, 200);
    t.equal((await send(who, 'POST', base, { action: 'allow', cidr: '10.9.0.0/16' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/distributions/${endpoint.id}/ip-rules`, { action: 'allow', cidr: '10.9.0.0/16' })).status, 403);
    t.equal((await send(who, 'PATCH', `${base}/${rule.id}`, { priority: 2 })).status, 403);
    t.equal((await send(who, 'DELETE', `${base}/${rule.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', base)).status, 403);
  t.equal((await send(null, 'GET', base)).status, 401);
  t.same(await policiesState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first rule (not a 409); another body under the same key is 422', async (t) => {
  const key = crypto.randomUUID();
  const body = { action: 'block', cidr: '198.18.0.0/15' };
  const first = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  t.equal(first.status, 201);
  const again = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  const other = await send(admin, 'POST', base, { ...body, priority: 9 }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
});

t.test('the configuration check names what the edge could not enforce, made behind the API\'s back: an unusable range, default deny admitting no one', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const rule = (await send(admin, 'POST', `/v1/cdn/endpoints/${e.id}/ip-rules`, { action: 'block', cidr: '198.51.100.0/24' })).body;
  // SQL makes them, as a restore or an operator might; the API refuses both.
  await query(cp, `update cdn_ip_rule set cidr = '10.0.0.5/8' where id = ?`, [rule.id]);
  await query(cp, `update cdn_endpoint set ip_default_action = 'deny' where id = ?`, [e.id]);
  const draft = await send(admin, 'POST', '/v1/cdn/config/validate', {});
  t.equal(draft.status, 201, draft.text);
  t.equal(draft.body.status, 'invalid');
  t.ok(draft.body.validation_errors.some((p: any) => p.resource_type === 'ip_rule' && p.resource_id === rule.id && /cidr: Host bits are set; the range is 10\.0\.0\.0\/8/.test(p.message)), 'the rule is named');
  t.ok(draft.body.validation_errors.some((p: any) => p.resource_type === 'endpoint' && p.resource_id === e.id && /ip_default_action is deny/.test(p.message)), 'the endpoint is named');
  await query(cp, `update cdn_endpoint set ip_default_action = 'allow' where id = ?`, [e.id]);
  await query(cp, `delete from cdn_ip_rule where id = ?`, [rule.id]);
  t.equal((await send(admin, 'POST', '/v1/cdn/config/validate', {})).body.status, 'valid', 'put right again');
});
