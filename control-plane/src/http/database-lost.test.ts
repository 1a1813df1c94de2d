// A request whose query is in flight when PostgreSQL goes away (shut down,
// restarted, or the connection cut) answers 503, as a request that cannot
// connect at all does: never a 500 that pages someone for a dependency.
import t, { type Test } from 'tap';
import pg from 'pg';
import { createAdmin, bearer } from '../../../test/support/auth.ts';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { detectServices } from '../../../test/support/services.ts';

const { postgresUrl } = await detectServices();
const skip = !postgresUrl && 'needs a PostgreSQL server';

/**
 * Holds a lock on cdn_endpoint from a connection of the test's own, so the app's query of the endpoints list waits
 * at the server; resolves with the app's waiting backend, once it waits.
 */
async function blockedListQuery(t: Test, cp: TestControlPlane, token: string) {
  const locker = new pg.Client({ connectionString: cp.database.url, query_timeout: 30_000 });
  locker.on('error', () => {}); // its connection is cut too in the second test
  await locker.connect();
  t.teardown(() => locker.end().catch(() => {}));
  await locker.query('begin');
  await locker.query('lock table cdn_endpoint in access exclusive mode');
  const answer = cp.request('GET', '/v1/cdn/endpoints?limit=5', { headers: bearer(token) });
  let waiting = 0;
  await eventually(async () => {
    const rows = await locker.query(`select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`);
    waiting = rows.rows[0]?.pid ?? 0;
    return waiting !== 0;
  }, 'the app\'s query waits for the lock');
  return { answer, waiting, locker };
}

/** The control plane serves again without a restart (a pooled connection that died with the first may cost one more 503). */
async function servedAgain(cp: TestControlPlane, token: string): Promise<void> {
  await eventually(async () => (await cp.request('GET', '/v1/cdn/endpoints?limit=5', { headers: bearer(token) })).status === 200, 'served again');
}

t.test('a query in flight when the server ends its connection (administrator command, shutdown) answers 503, not 500', { skip }, async (t) => {
  const cp = await startTestControlPlane(t, { throughProxy: true });
  const admin = await createAdmin(cp);
  const { answer, waiting, locker } = await blockedListQuery(t, cp, admin.accessToken);
  await locker.query('select pg_terminate_backend($1)', [waiting]); // what a fast shutdown does to every backend: 57P01
  const res = await answer;
  t.equal(res.status, 503);
  t.equal(res.body.code, 'SERVICE_UNAVAILABLE');
  await locker.query('rollback');
  await servedAgain(cp, admin.accessToken);
});

t.test('a query in flight when the connection to the database is cut answers 503, not 500', { skip }, async (t) => {
  const cp = await startTestControlPlane(t, { throughProxy: true });
  const admin = await createAdmin(cp);
  const { answer } = await blockedListQuery(t, cp, admin.accessToken);
  cp.database.proxy!.drop(); // the app's connection ends mid-query ("Connection terminated unexpectedly")
  const res = await answer;
  t.equal(res.status, 503);
  t.equal(res.body.code, 'SERVICE_UNAVAILABLE');
  await servedAgain(cp, admin.accessToken);
});
