// CDN_PUBLISH_MODE=auto (DESIGN.md §5): CDN writes are published without
// POST publish, a burst of writes coalesces into fewer versions than writes,
// a write the edge does not see (tags, an endpoint's status) publishes
// nothing, and the same works on the embedded PGlite database (npm start).
import t from 'tap';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { collectingLogger } from '../../../test/support/cdn-policies.ts';
import { entities } from '../capabilities.ts';
import { openDatabase } from '../db/orm.ts';
import { startControlPlane } from '../server.ts';
import { createStore } from '../store/index.ts';
import { CONFIG_PUBLISHED_CHANNEL } from './contracts.ts';
import { detectServices } from '../../../test/support/services.ts';

const env = (pollMs: number) => ({ ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', CDN_PUBLISH_MODE: 'auto', CDN_PUBLISH_POLL_MS: String(pollMs) });

const versionCount = async (cp: TestControlPlane) => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_version`))[0]!.n;
/** Waits until every write so far has been looked at by the publisher. */
const settledPublisher = (cp: TestControlPlane) => eventually(async () => {
  const [row] = await query<{ revision: string; compiled_revision: string }>(cp, `select revision, compiled_revision from cdn_config_revision`);
  return row!.revision === row!.compiled_revision;
}, 'the publisher has compiled the latest revision');

t.test('auto mode on PostgreSQL', async (t) => {
  const cp = await startTestControlPlane(t, { env: env(500) });
  const { admin } = await cdnCallers(cp);
  const send = caller(cp);
  await settledPublisher(cp);
  t.equal(await versionCount(cp), 0, 'an empty configuration publishes nothing');

  const { endpoint } = await makeEndpoint(cp, admin);
  await eventually(async () => (await cp.app.edgeConfig.active())?.manifest.has(`endpoint/${endpoint.id}`) ?? false, 'the new endpoint is published');
  await settledPublisher(cp);
  const [first] = await query<{ description: string; published_by: string | null; status: string }>(cp, `select description, published_by, status from cdn_config_version`);
  t.match(first, { status: 'active', published_by: null, description: /automatically/ });

  t.test('a burst of writes coalesces into fewer versions than writes, ending on the last write', async (t) => {
    const before = await versionCount(cp);
    const writes = 6;
    for (let i = 1; i <= writes; i++) {
      const res = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: `burst ${i}` });
      t.equal(res.status, 200, res.text);
    }
    await settledPublisher(cp);
    const created = (await versionCount(cp)) - before;
    t.ok(created >= 1 && created < writes, `${created} version(s) for ${writes} writes`);
    const active = (await cp.app.edgeConfig.active())!;
    const body = (await cp.app.edgeConfig.bodies([active.manifest.get(`endpoint/${endpoint.id}`)!.sha256])).values().next().value!;
    t.equal(JSON.parse(Buffer.from(body).toString()).name, `burst ${writes}`);
  });

  t.test('writes the edge does not see publish nothing: tags, status moves, origin health', async (t) => {
    const before = await versionCount(cp);
    const revision = async () => (await query<{ r: string }>(cp, `select revision as r from cdn_config_revision`))[0]!.r;
    const r0 = await revision();
    await query(cp, `update cdn_endpoint set status = 'active' where id = ?`, [endpoint.id]);
    await query(cp, `update cdn_origin set health_status = 'healthy'`);
    t.equal(await revision(), r0, 'status and health moves do not even bump the revision');
    t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { tags: ['a', 'b'] })).status, 200);
    t.not(await revision(), r0, 'a tag change bumps it');
    await settledPublisher(cp);
    t.equal(await versionCount(cp), before, 'but publishes no version');
  });

  t.test('disabling an endpoint publishes it disabled', async (t) => {
    const before = await versionCount(cp);
    t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/disable`)).status, 200);
    await settledPublisher(cp);
    t.equal(await versionCount(cp), before + 1);
    const active = (await cp.app.edgeConfig.active())!;
    const body = (await cp.app.edgeConfig.bodies([active.manifest.get(`endpoint/${endpoint.id}`)!.sha256])).values().next().value!;
    t.equal(JSON.parse(Buffer.from(body).toString()).enabled, false);
  });
});

t.test('auto and manual publishing on the embedded PGlite database', async (t) => {
  const cp = await startTestControlPlane(t, { env: env(50), embedded: true });
  t.equal(cp.database.real, false);
  const { admin } = await cdnCallers(cp);
  const send = caller(cp);
  const { endpoint } = await makeEndpoint(cp, admin);
  await eventually(async () => (await cp.app.edgeConfig.active())?.manifest.has(`endpoint/${endpoint.id}`) ?? false, 'published automatically');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'on pglite' })).status, 200);
  await settledPublisher(cp);
  const published = await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'by hand' });
  t.equal(published.status, 201, published.text);
  const validated = await send(admin, 'POST', '/v1/cdn/config/validate', {});
  t.equal(validated.body.status, 'valid');
  const superseded = (await query<{ id: string }>(cp, `select id from cdn_config_version where status = 'superseded' order by version_number limit 1`))[0]!;
  const rolled = await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: superseded.id });
  t.equal(rolled.status, 201, rolled.text);
  await settledPublisher(cp);
  t.equal((await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_version where status = 'active'`))[0]!.n, 1);
});

t.test('a database error does not stop the publisher: it logs, retries, and publishes once the database answers again', async (t) => {
  const { log, lines } = collectingLogger();
  const cp = await startTestControlPlane(t, { env: env(20), log });
  const { admin } = await cdnCallers(cp);
  await settledPublisher(cp);
  // The counter out of reach: every look at it fails (a real error from PostgreSQL).
  await query(cp, `alter table cdn_config_revision rename to cdn_config_revision_away`);
  await eventually(() => lines.some((l) => l.includes('the configuration publisher failed')), 'the failure is logged');
  const failedAt = lines.length;
  await query(cp, `alter table cdn_config_revision_away rename to cdn_config_revision`);
  const { endpoint } = await makeEndpoint(cp, admin);
  await eventually(async () => (await cp.app.edgeConfig.active())?.manifest.has(`endpoint/${endpoint.id}`) ?? false, 'published after the database answers again');
  t.ok(lines.slice(failedAt).some((l) => l.includes('works again')), 'the recovery is logged');
  t.equal(lines.filter((l) => l.includes('the configuration publisher failed')).length, 1, 'one warning for the whole failed run, not one per turn');
});

const services = await detectServices();
t.test('two replicas on one database publish each change once', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis' }, async (t) => {
  const a = await startTestControlPlane(t, { env: env(20) });
  const dbB = await openDatabase({ databaseUrl: a.database.url, dataDir: a.config.dataDir, entities, poolMax: 2 });
  const storeB = createStore(a.config.REDIS_URL, a.storeKeyPrefix);
  const b = await startControlPlane(a.config, { db: dbB, store: storeB });
  t.teardown(async () => { await b.close(); await storeB.close(); await dbB.close(); });
  const announced: string[] = [];
  t.teardown(await storeB.subscribe(CONFIG_PUBLISHED_CHANNEL, (m) => announced.push(m)));
  const { admin } = await cdnCallers(a);
  const send = caller(a);
  const { endpoint } = await makeEndpoint(a, admin);
  await settledPublisher(a);
  for (let i = 1; i <= 3; i++) {
    const before = await versionCount(a);
    t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: `replicated ${i}` })).status, 200);
    await settledPublisher(a);
    t.equal(await versionCount(a), before + 1, `change ${i}: one version, whichever replica published it`);
  }
  const active = (await b.app.edgeConfig.active())!;
  t.equal(active.version, (await a.app.edgeConfig.active())!.version, 'both replicas serve the same active version');
  await eventually(() => announced.some((m) => JSON.parse(m).version === active.version), 'the announcement reaches the other replica\'s store');
});
