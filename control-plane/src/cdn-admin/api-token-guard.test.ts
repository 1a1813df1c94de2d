// Machine API tokens (`Bearer cdn_...`) go through the same guard as JWTs:
// the CDN administration module resolves the stored token, and its role is
// evaluated against the stored role permissions like any other caller's. Probe
// routes stand in for the CDN reads and writes of other slices.
import t from 'tap';
import { z } from 'zod';
import { bearer, createAdmin, createLoggedInUser, createSuperadmin, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { data, routesFor } from '../http/route.ts';
import type { Permission } from '../permissions/catalog.ts';

const probe = (permission: Permission) => routesFor()({
  method: 'post', path: `/v1/test/${permission.replace(/\./g, '-')}`, summary: `Needs ${permission}`, tags: ['test'],
  access: { permission }, responses: { 200: data(z.object({ caller: z.string() })) },
  async handler({ rc }) {
    return { caller: `${rc.actor!.type}:${rc.actor!.id}` };
  },
});

// Real time, which a test may move forward (`clock.skewMs`): the last test does, so nothing after it sees the jump.
const clock = { skewMs: 0, now: () => new Date(Date.now() + clock.skewMs) };
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock, extraRoutes: [probe('cdn.read'), probe('cdn.purge'), probe('cdn.write')] });
const admin = await createAdmin(cp);

async function issue(role: string, expires_at?: string): Promise<{ id: string; token: string }> {
  const res = await cp.request('POST', '/v1/cdn/api-tokens', { headers: bearer(admin.accessToken), json: { name: `${role} token`, role, expires_at } });
  if (res.status !== 201) throw new Error(`${res.status} ${res.text}`);
  return res.body;
}
const call = (path: string, token: string) => cp.request('POST', path, { headers: bearer(token) });

t.test('a viewer token reads but may not purge or write', async (t) => {
  const viewer = await issue('viewer');
  const read = await call('/v1/test/cdn-read', viewer.token);
  t.equal(read.status, 200);
  t.equal(read.body.data.caller, `api_token:${viewer.id}`);
  t.equal((await call('/v1/test/cdn-purge', viewer.token)).status, 403);
  const write = await call('/v1/test/cdn-write', viewer.token);
  t.equal(write.status, 403);
  t.equal(write.body.code, 'FORBIDDEN');
});

t.test('an operator token reads and purges but may not write', async (t) => {
  const operator = await issue('operator');
  t.equal((await call('/v1/test/cdn-read', operator.token)).status, 200);
  t.equal((await call('/v1/test/cdn-purge', operator.token)).status, 200);
  t.equal((await call('/v1/test/cdn-write', operator.token)).status, 403);
});

t.test('a token is judged on its role\'s stored permissions as they are now: a change written in SQL applies once its notification arrives', async (t) => {
  const operator = await issue('operator');
  t.equal((await call('/v1/test/cdn-purge', operator.token)).status, 200);
  const [grant] = await query<{ id: string; resource_type: string | null; resource_id: string | null }>(cp,
    `select id, resource_type, resource_id from role_permission where role_name = 'operator' and permission = 'cdn.purge'`);
  t.ok(grant, 'the operator role carries cdn.purge');
  await query(cp, `delete from role_permission where id = ?`, [grant!.id]);
  t.teardown(() => query(cp, `insert into role_permission (id, role_name, permission, resource_type, resource_id) values (?, 'operator', 'cdn.purge', ?, ?)`,
    [grant!.id, grant!.resource_type, grant!.resource_id]));
  // Written past this replica's ORM (as another replica or the CLI would), the change reaches the cache by
  // PostgreSQL's notification, a moment after the commit.
  await eventually(async () => (await call('/v1/test/cdn-purge', operator.token)).status === 403, 'the purge permission is gone', 5_000);
  t.pass('a later request no longer may');
  t.equal((await call('/v1/test/cdn-read', operator.token)).status, 200, 'its other permissions stand');
});

t.test('a token revoked in SQL (another replica, the CLI) is refused once the notification arrives', async (t) => {
  const token = await issue('operator');
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200, 'resolved, and cached');
  await query(cp, `update cdn_api_token set status = 'revoked', revoked_at = now() where id = ?`, [token.id]);
  await eventually(async () => (await call('/v1/test/cdn-read', token.token)).status === 401, 'the revoked token is refused', 5_000);
  t.pass('refused');
});

t.test('an admin token writes', async (t) => {
  const token = await issue('admin');
  t.equal((await call('/v1/test/cdn-write', token.token)).status, 200);
});

t.test('a revoked token is 401 on the next request', async (t) => {
  const token = await issue('admin');
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200);
  t.equal((await cp.request('DELETE', `/v1/cdn/api-tokens/${token.id}`, { headers: bearer(admin.accessToken) })).status, 204);
  const res = await call('/v1/test/cdn-read', token.token);
  t.equal(res.status, 401);
  t.equal(res.body.code, 'UNAUTHORIZED');
});

t.test('an expired token is 401', async (t) => {
  const token = await issue('viewer', new Date(Date.now() + 60_000).toISOString());
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200);
  // Moved into the past in SQL (past this replica's ORM): the cached resolution goes with the change's notification.
  await query(cp, `update cdn_api_token set expires_at = now() - interval '1 second' where id = ?`, [token.id]);
  await eventually(async () => (await call('/v1/test/cdn-read', token.token)).status === 401, 'the expired token is refused', 5_000);
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 401);
});

t.test('an unknown token is 401; JWT callers are unaffected', async (t) => {
  const res = await call('/v1/test/cdn-read', 'cdn_unknown');
  t.equal(res.status, 401);
  t.equal(res.body.code, 'UNAUTHORIZED');
  const viewer = await createLoggedInUser(cp, { roles: ['viewer', 'subscriber'] });
  t.equal((await call('/v1/test/cdn-read', viewer.accessToken)).status, 200);
  t.equal((await call('/v1/test/cdn-write', viewer.accessToken)).status, 403);
});

t.test('regression: the tokens of a deactivated admin are refused until the admin is reactivated', async (t) => {
  const superadmin = await createSuperadmin(cp);
  const issuer = await createAdmin(cp);
  const res = await cp.request('POST', '/v1/cdn/api-tokens', { headers: bearer(issuer.accessToken), json: { name: 'issuer token', role: 'admin' } });
  t.equal(res.status, 201);
  const token = res.body.token as string;
  t.equal((await call('/v1/test/cdn-write', token)).status, 200);
  const off = await cp.request('POST', `/v1/cdn/admin/users/${issuer.id}/deactivate`, { headers: bearer(superadmin.accessToken) });
  t.equal(off.status, 200, off.text);
  const refused = await call('/v1/test/cdn-read', token);
  t.equal(refused.status, 401, 'refused on the very next request');
  t.equal(refused.body.code, 'UNAUTHORIZED');
  t.equal((await cp.request('POST', `/v1/cdn/admin/users/${issuer.id}/reactivate`, { headers: bearer(superadmin.accessToken) })).status, 200);
  t.equal((await call('/v1/test/cdn-read', token)).status, 200, 'the token was never revoked: it works again');
});

t.test('regression: an admin token kept its rights after its issuer was demoted; it does what the role allows and the issuer still may', async (t) => {
  const superadmin = await createSuperadmin(cp);
  const issuer = await createAdmin(cp);
  const res = await cp.request('POST', '/v1/cdn/api-tokens', { headers: bearer(issuer.accessToken), json: { name: 'issuer token', role: 'admin' } });
  t.equal(res.status, 201);
  const token = res.body.token as string;
  t.equal((await call('/v1/test/cdn-write', token)).status, 200, 'an admin token of an admin writes');
  const mint = () => cp.request('POST', '/v1/cdn/api-tokens', { headers: bearer(token), json: { name: 'minted', role: 'admin' } });
  t.equal((await mint()).status, 201, 'and mints admin tokens');

  const demote = await cp.request('PATCH', `/v1/cdn/admin/users/${issuer.id}`, { headers: bearer(superadmin.accessToken), json: { role: 'operator' } });
  t.equal(demote.status, 200, demote.text);
  // The role change is written past the ORM (user_role): the cached resolution goes with its notification.
  await eventually(async () => (await call('/v1/test/cdn-write', token)).status === 403, 'the write the issuer lost is refused', 5_000);
  t.equal((await mint()).status, 403, 'no more minting');
  t.equal((await call('/v1/test/cdn-purge', token)).status, 200, 'what the issuer still may (an operator purges) the token may');
  t.equal((await call('/v1/test/cdn-read', token)).status, 200);
  t.equal((await call('/v1/test/cdn-write', issuer.accessToken)).status, 403, 'as the issuer\'s own token');

  const restore = await cp.request('PATCH', `/v1/cdn/admin/users/${issuer.id}`, { headers: bearer(superadmin.accessToken), json: { role: 'admin' } });
  t.equal(restore.status, 200);
  await eventually(async () => (await call('/v1/test/cdn-write', token)).status === 200, 'promoted again, the token writes again', 5_000);

  // A role that expires is judged at each call, cached or not: the expiry needs no notification.
  // Regression (a flaky check): a call right after the update could still use the resolution cached before it, without the expiry.
  // A sentinel token refused by a later change on the same channel shows the update has been heard.
  const sentinel = await issue('viewer');
  t.equal((await call('/v1/test/cdn-read', sentinel.token)).status, 200, 'the sentinel resolved and cached');
  await query(cp, `update user_role set expires_at = ? where user_id = ? and role_name = 'admin'`, [new Date(clock.now().getTime() + 60_000), issuer.id]);
  await query(cp, `update cdn_api_token set created_by = null where id = ?`, [sentinel.id]);
  await eventually(async () => (await call('/v1/test/cdn-read', sentinel.token)).status === 403, 'the role change is heard (a later change is)', 5_000);
  t.equal((await call('/v1/test/cdn-write', token)).status, 200, 'resolved again, with the expiry');
  clock.skewMs += 2 * 60_000;
  t.teardown(() => { clock.skewMs -= 2 * 60_000; });
  t.equal((await call('/v1/test/cdn-write', token)).status, 403, 'past the role\'s expiry the token lost it too');
  t.equal((await call('/v1/test/cdn-read', token)).status, 403, 'the issuer kept subscriber only: no CDN right at all');
});

t.test('a token whose issuer is unknown may do nothing', async (t) => {
  const token = await issue('admin');
  await query(cp, `update cdn_api_token set created_by = null where id = ?`, [token.id]);
  await eventually(async () => (await call('/v1/test/cdn-read', token.token)).status === 403, 'refused once the change is heard', 5_000);
  t.pass('refused');
});

t.test('regression: a call with a known API token forks no entity manager (the resolver took the request\'s, forking one per call)', async (t) => {
  const token = await issue('viewer');
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200, 'resolved, and cached');
  const em = cp.app.db.orm.em;
  const fork = em.fork.bind(em);
  let forks = 0;
  em.fork = ((...args: Parameters<typeof fork>) => { forks++; return fork(...args); }) as typeof em.fork;
  t.teardown(() => { em.fork = fork; });
  for (let i = 0; i < 3; i++) t.equal((await call('/v1/test/cdn-read', token.token)).status, 200);
  t.equal(forks, 0, 'authentication, authorization and the answer, with no unit of work');
});

t.test('a cached token is refused once its expiry passes, with no change to hear of (the expiry is judged on every call)', async (t) => {
  const token = await issue('viewer', new Date(clock.now().getTime() + 60_000).toISOString());
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200, 'resolved, and cached with its expiry');
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 200, 'from the cache');
  clock.skewMs += 2 * 60_000;
  t.equal((await call('/v1/test/cdn-read', token.token)).status, 401, 'two minutes on: expired, though nothing changed in the database');
});
