// Two control-plane replicas on one PostgreSQL and one Redis: a revocation on
// one is refused on the other (DESIGN.md §9), through the shared revocation
// list rather than at token expiry; an API token revoked on one is refused on
// the other, which had it cached (cdn-admin/api-token-cache.ts), and so is
// one whose issuer was demoted, for what the issuer lost.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { entities } from '../../control-plane/src/capabilities.ts';
import { openDatabase } from '../../control-plane/src/db/orm.ts';
import { startControlPlane } from '../../control-plane/src/server.ts';
import { createStore } from '../../control-plane/src/store/index.ts';
import { bearer, createAdmin, createSuperadmin, registerVerifiedUser, RELAXED_LIMITS } from '../support/auth.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();

t.test('logout and session revocation on replica A are refused on replica B', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis' }, async (t) => {
  const a = await startTestControlPlane(t);
  const dbB = await openDatabase({ databaseUrl: a.database.url!, dataDir: a.config.dataDir, entities, poolMax: 2 });
  const storeB = createStore(a.config.REDIS_URL, a.storeKeyPrefix);
  const b = await startControlPlane(a.config, { db: dbB, store: storeB });
  t.teardown(async () => { await b.close(); await storeB.close(); await dbB.close(); });
  const onB = (path: string, token: string) => fetch(`${b.url}${path}`, { headers: bearer(token) });

  const user = await registerVerifiedUser(a);
  t.equal((await onB('/v1/users/me', user.accessToken)).status, 200, 'B accepts A\'s token (shared signing keys)');

  const logout = await a.request('POST', '/v1/auth/logout', { headers: bearer(user.accessToken) });
  t.equal(logout.status, 200);
  let status = 0;
  for (let i = 0; i < 100 && status !== 401; i++) {
    status = (await onB('/v1/users/me', user.accessToken)).status;
    if (status !== 401) await sleep(5);
  }
  t.equal(status, 401, 'B refuses the logged-out token');

  // And the other way round: a session revoked through B stops working on A.
  const again = await a.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password } });
  const token = again.body.data.access_token as string;
  const sessions = await (await onB('/v1/me/auth/sessions', token)).json() as { data: { session_id: string; is_current: boolean }[] };
  const current = sessions.data.find((s) => s.is_current)!;
  const revoke = await fetch(`${b.url}/v1/me/auth/sessions/${current.session_id}`, { method: 'DELETE', headers: bearer(token) });
  t.equal(revoke.status, 204);
  let statusA = 0;
  for (let i = 0; i < 100 && statusA !== 401; i++) {
    statusA = (await a.request('GET', '/v1/users/me', { headers: bearer(token) })).status;
    if (statusA !== 401) await sleep(5);
  }
  t.equal(statusA, 401, 'A refuses the token of the session revoked on B');
});

t.test('an API token revoked on replica A is refused on replica B, which had it cached', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis' }, async (t) => {
  const a = await startTestControlPlane(t, { env: RELAXED_LIMITS });
  const dbB = await openDatabase({ databaseUrl: a.database.url!, dataDir: a.config.dataDir, entities, poolMax: 2 });
  const storeB = createStore(a.config.REDIS_URL, a.storeKeyPrefix);
  const b = await startControlPlane(a.config, { db: dbB, store: storeB });
  t.teardown(async () => { await b.close(); await storeB.close(); await dbB.close(); });
  const onB = (token: string) => fetch(`${b.url}/v1/cdn/endpoints`, { headers: bearer(token) });

  const admin = await createAdmin(a);
  const created = await a.request('POST', '/v1/cdn/api-tokens', { headers: bearer(admin.accessToken), json: { name: 'ci', role: 'viewer' } });
  t.equal(created.status, 201);
  for (let i = 0; i < 3; i++) t.equal((await onB(created.body.token)).status, 200, 'B resolves the token (and keeps it)');

  t.equal((await a.request('DELETE', `/v1/cdn/api-tokens/${created.body.id}`, { headers: bearer(admin.accessToken) })).status, 204);
  let status = 0;
  for (let i = 0; i < 200 && status !== 401; i++) {
    status = (await onB(created.body.token)).status;
    if (status !== 401) await sleep(5);
  }
  t.equal(status, 401, 'B refuses it once the revocation is heard');
});

t.test('an API token loses what its issuer lost, on both replicas (issue 20, item 5)', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis' }, async (t) => {
  const a = await startTestControlPlane(t, { env: RELAXED_LIMITS });
  const dbB = await openDatabase({ databaseUrl: a.database.url!, dataDir: a.config.dataDir, entities, poolMax: 2 });
  const storeB = createStore(a.config.REDIS_URL, a.storeKeyPrefix);
  const b = await startControlPlane(a.config, { db: dbB, store: storeB });
  t.teardown(async () => { await b.close(); await storeB.close(); await dbB.close(); });
  const replicas = { a: a.url, b: b.url };

  const superadmin = await createSuperadmin(a);
  const issuer = await createAdmin(a);
  const created = await a.request('POST', '/v1/cdn/api-tokens', { headers: bearer(issuer.accessToken), json: { name: 'deploy', role: 'admin' } });
  t.equal(created.status, 201);
  const token = created.body.token as string;
  const on = (url: string, method: string, path: string, json?: unknown) =>
    fetch(`${url}${path}`, { method, headers: { ...bearer(token), 'content-type': 'application/json' }, body: json === undefined ? undefined : JSON.stringify(json) });
  const mint = (url: string) => on(url, 'POST', '/v1/cdn/api-tokens', { name: 'minted', role: 'admin' });
  const write = (url: string) => on(url, 'POST', '/v1/cdn/origins', { name: 'written', host: '93.184.216.34' });
  const read = (url: string) => on(url, 'GET', '/v1/cdn/origins');
  for (const [name, url] of Object.entries(replicas)) {
    for (let i = 0; i < 2; i++) t.equal((await read(url)).status, 200, `${name} resolves the token (and keeps it)`);
    t.equal((await mint(url)).status, 201, `${name}: an admin's admin token mints`);
    t.equal((await write(url)).status, 201, `${name}: and writes`);
  }

  const demote = await a.request('PATCH', `/v1/cdn/admin/users/${issuer.id}`, { headers: bearer(superadmin.accessToken), json: { role: 'viewer' } });
  t.equal(demote.status, 200, demote.text);
  t.equal((await a.request('POST', '/v1/cdn/api-tokens', { headers: bearer(issuer.accessToken), json: { name: 'x', role: 'viewer' } })).status, 403, 'the issuer\'s own JWT is refused at once');
  for (const [name, url] of Object.entries(replicas)) {
    let status = 0;
    for (let i = 0; i < 400 && status !== 403; i++) {
      status = (await mint(url)).status;
      if (status !== 403) await sleep(5);
    }
    t.equal(status, 403, `${name} refuses to mint once the demotion is heard`);
    t.equal((await write(url)).status, 403, `${name} refuses the write the issuer lost`);
    t.equal((await read(url)).status, 200, `${name} still reads: the issuer is a viewer`);
  }
});
