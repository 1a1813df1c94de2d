// LISTEN on a connection of its own: notifications reach the handler, the
// listener's own probes do not, and it reports when it stops hearing.
import t from 'tap';
import { createTestDatabase } from '../../../test/support/database.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { detectServices } from '../../../test/support/services.ts';
import { listen } from './listener.ts';

t.test('refuses a channel name it would have to quote', async (t) => {
  await t.rejects(listen('postgresql://127.0.0.1:1/x', 'bad; drop table x', { message() {}, state() {} }), /not a channel name/);
});

const { postgresUrl } = await detectServices();
t.test('on PostgreSQL', { skip: !postgresUrl && 'PostgreSQL not reachable' }, async (t) => {
  const test = await createTestDatabase({ postgresUrl, throughProxy: true });
  t.teardown(() => test.dispose());
  const messages: string[] = [];
  const states: boolean[] = [];
  const listener = await listen(test.url, 'listener_test', { message: (m) => messages.push(m), state: (live) => states.push(live) },
    { probeMs: 20, timeoutMs: 2_000, retryMs: 50 });
  t.teardown(() => listener.close());
  t.equal(listener.live, true);
  t.same(states, [true]);

  const sql = (text: string) => test.db.orm.em.getConnection().execute(text);
  await sql(`select pg_notify('listener_test', 'one')`);
  await sql(`select pg_notify('other_channel', 'not ours')`);
  await sql(`select pg_notify('listener_test', 'two')`);
  await eventually(() => messages.length >= 2, 'both notifications', 5_000);
  // Many probes went by meanwhile (every 20 ms): none reached the handler.
  await new Promise((r) => setTimeout(r, 200));
  t.same(messages, ['one', 'two'], 'the channel\'s notifications, in order, and no probe');

  test.proxy!.refuseNew(true);
  test.proxy!.drop();
  await eventually(() => !listener.live, 'the loss noticed', 5_000);
  test.proxy!.refuseNew(false);
  await eventually(() => listener.live, 'back', 5_000);
  t.same(states, [true, false, true]);
  await sql(`select pg_notify('listener_test', 'three')`);
  await eventually(() => messages.includes('three'), 'heard again after reconnecting', 5_000);

  await listener.close();
  t.equal(listener.live, false);
  await sql(`select pg_notify('listener_test', 'after close')`);
  await new Promise((r) => setTimeout(r, 100));
  t.notOk(messages.includes('after close'), 'nothing after close');
});
