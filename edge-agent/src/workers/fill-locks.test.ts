import t from 'tap';
import { FillLockClient, FillLocks, type FillLockMessage } from './fill-locks.ts';

t.test('the first worker to ask leads; the others follow once it is done', async (t) => {
  const locks = new FillLocks();
  t.same(locks.request(0, 1, 'k'), [{ worker: 0, ticket: 1, key: 'k', lead: true }]);
  t.same(locks.request(1, 7, 'k'), [], 'a second worker waits');
  t.same(locks.request(2, 3, 'k'), []);
  t.same(locks.done(1, 'k'), [], 'only the holder ends its fill');
  t.same(locks.done(0, 'k'), [{ worker: 1, ticket: 7, key: 'k', lead: false }, { worker: 2, ticket: 3, key: 'k', lead: false }]);
  t.equal(locks.size, 0);
  t.same(locks.request(1, 8, 'k'), [{ worker: 1, ticket: 8, key: 'k', lead: true }], 'free again');
});

t.test('a worker that exits releases what it held, and waits no more', async (t) => {
  const locks = new FillLocks();
  locks.request(0, 1, 'a');
  locks.request(1, 2, 'a');
  locks.request(1, 3, 'b');
  locks.request(0, 4, 'b');
  t.same(locks.workerGone(0), [{ worker: 1, ticket: 2, key: 'a', lead: false }]);
  t.same(locks.done(1, 'b'), [], 'its wait for b was dropped');
});

t.test('a waiter that gave up is not told', async (t) => {
  const locks = new FillLocks();
  locks.request(0, 1, 'k');
  locks.request(1, 2, 'k');
  locks.cancel(1, 2, 'k');
  t.same(locks.done(0, 'k'), []);
});

t.test('the client: a turn answers its ticket; no answer in time means alone; a late lead is handed back', async (t) => {
  const sent: FillLockMessage[] = [];
  const client = new FillLockClient((m) => { sent.push(m); return true; }, 50);
  const first = client.acquire('k');
  t.same(sent[0], { t: 'fillLock', ticket: 1, key: 'k' });
  client.turn(1, 'k', true);
  t.equal(await first, 'lead');
  const second = client.acquire('k');
  client.turn(2, 'k', false);
  t.equal(await second, 'follow');
  t.equal(await client.acquire('k'), 'alone', 'the wait ran out');
  t.same(sent.at(-1), { t: 'fillCancel', ticket: 3, key: 'k' });
  client.turn(3, 'k', true);
  t.same(sent.at(-1), { t: 'fillDone', key: 'k' }, 'a lead granted after the wait ran out is released at once');
});

t.test('the client without a primary fills alone, and abandon ends every wait', async (t) => {
  const offline = new FillLockClient(() => false, 10_000);
  t.equal(await offline.acquire('k'), 'alone');
  const client = new FillLockClient(() => true, 10_000);
  const waiting = client.acquire('k');
  client.abandon();
  t.equal(await waiting, 'alone');
});
