// The cache of resolved API tokens: entries are dropped when a change that a
// resolution reads commits (this replica's ORM at its commit, any writer by
// PostgreSQL's notification), never kept across a read that raced a drop, and
// neither kept nor served while the notifications cannot be heard.
import t from 'tap';
import { createTestDatabase } from '../../../test/support/database.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { detectServices } from '../../../test/support/services.ts';
import type { Database } from '../db/orm.ts';
import { User, defaultNotificationPreferences } from '../accounts/index.ts';
import { ApiTokenCache } from './api-token-cache.ts';

type Row = { id: string };

t.test('on the embedded database (no server to listen to) nothing is cached', async (t) => {
  const cache = await ApiTokenCache.start<Row>({ url: undefined } as Database);
  t.teardown(() => cache.close());
  t.equal(cache.live, false);
  cache.remember('k', { id: '1' }, cache.generation);
  t.equal(cache.get('k'), undefined);
});

const { postgresUrl } = await detectServices();
t.test('on PostgreSQL', { skip: !postgresUrl && 'PostgreSQL not reachable' }, async (t) => {
  const test = await createTestDatabase({ postgresUrl, throughProxy: true });
  t.teardown(() => test.dispose());
  const sql = (text: string) => test.db.orm.em.getConnection().execute(text);
  const cache = await ApiTokenCache.start<Row>(test.db, undefined, { probeMs: 200, timeoutMs: 2_000, retryMs: 100 });
  t.teardown(() => cache.close());
  t.equal(cache.live, true, 'live once the listener is subscribed');

  t.test('keeps what it is given while nothing changes', async (t) => {
    cache.remember('a', { id: 'a' }, cache.generation);
    t.same(cache.get('a'), { id: 'a' });
  });

  t.test('a read that began before a drop is not kept after it', async (t) => {
    const before = cache.generation;
    cache.invalidate();
    cache.remember('b', { id: 'b' }, before);
    t.equal(cache.get('b'), undefined);
  });

  t.test('a change written in SQL (another replica, the CLI) drops every entry once its notification arrives', async (t) => {
    for (const statement of [
      // Statement-level triggers fire even when no row changes.
      `update role_permission set resource_id = resource_id where false`,
      `delete from cdn_api_token where false`,
      `delete from app_user where false`,
    ]) {
      cache.remember('c', { id: 'c' }, cache.generation);
      await sql(statement);
      await eventually(() => cache.get('c') === undefined, statement, 5_000);
      t.pass(statement);
    }
  });

  t.test('on this replica an ORM change is dropped at its commit, not after the notification', async (t) => {
    // Without the triggers only the ORM subscriber can drop the entries: the test sees its work alone.
    await sql(`drop trigger app_user_auth_update on app_user`);
    await sql(`drop trigger app_user_auth_delete on app_user`);
    const em = test.db.orm.em.fork();
    const user = em.create(User, { email: `cache-${Date.now()}@example.com`, status: 'active', notification_preferences: { ...defaultNotificationPreferences } } as never);
    await em.flush();
    cache.remember('d', { id: 'd' }, cache.generation);
    await em.transactional(async (tx) => {
      tx.getReference(User, user.id).status = 'suspended';
      await tx.flush();
      t.same(cache.get('d'), { id: 'd' }, 'kept until the commit');
    });
    t.equal(cache.get('d'), undefined, 'dropped when the transaction commits');

    cache.remember('e', { id: 'e' }, cache.generation);
    const other = test.db.orm.em.fork();
    other.getReference(User, user.id).status = 'active';
    await other.flush();
    t.equal(cache.get('e'), undefined, 'and when a flush commits its own transaction');

    cache.remember('f', { id: 'f' }, cache.generation);
    const unrelated = test.db.orm.em.fork();
    unrelated.getReference(User, user.id).display_name = 'someone';
    await unrelated.flush();
    t.same(cache.get('f'), { id: 'f' }, 'a change no resolution reads leaves the entries');
  });

  t.test('while the notifications cannot be heard, nothing is kept or served', async (t) => {
    cache.remember('g', { id: 'g' }, cache.generation);
    test.proxy!.refuseNew(true);
    test.proxy!.drop();
    await eventually(() => !cache.live, 'the listener noticed the loss', 5_000);
    t.equal(cache.get('g'), undefined, 'what it held before is gone');
    cache.remember('h', { id: 'h' }, cache.generation);
    t.equal(cache.get('h'), undefined, 'nothing new is kept');
    test.proxy!.refuseNew(false);
    await eventually(() => cache.live, 'the listener is back', 5_000);
    cache.remember('i', { id: 'i' }, cache.generation);
    t.same(cache.get('i'), { id: 'i' }, 'kept again once it listens');
  });

  t.test('a connection that goes silent is noticed by the probe', async (t) => {
    cache.remember('j', { id: 'j' }, cache.generation);
    test.proxy!.freeze(true);
    t.teardown(() => test.proxy!.freeze(false));
    await eventually(() => !cache.live, 'the probe gave up on the silent connection', 10_000);
    t.equal(cache.get('j'), undefined);
    test.proxy!.freeze(false);
    test.proxy!.drop();
    await eventually(() => cache.live, 'the listener is back', 5_000);
  });
});
