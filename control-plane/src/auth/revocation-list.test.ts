import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Redis } from 'ioredis';
import { startTcpProxy } from '../../../test/support/tcp-proxy.ts';
import { detectServices } from '../../../test/support/services.ts';
import { MemoryStore } from '../store/memory-store.ts';
import { RedisStore } from '../store/redis-store.ts';
import type { KeyValueStore } from '../store/store.ts';
import { RevocationList } from './revocation-list.ts';

const { redisUrl } = await detectServices();

/** Polls until the condition holds; fails after timeoutMs. */
async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await sleep(10);
  }
}

t.test('a revocation is refused at once where it was made, and on another replica by pub/sub', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  const prefix = `t:${randomBytes(6).toString('hex')}:`;
  const storeA = new RedisStore(redisUrl!, { keyPrefix: prefix });
  const storeB = new RedisStore(redisUrl!, { keyPrefix: prefix });
  const a = await RevocationList.start(storeA);
  const b = await RevocationList.start(storeB);
  t.teardown(async () => { await a.close(); await b.close(); await storeA.close(); await storeB.close(); });
  t.equal(a.mirrored, true);
  t.equal(b.mirrored, true);
  t.equal(a.check(['revoked:jti:x']), false);
  await a.revoke(['revoked:jti:x'], 60_000);
  t.equal(a.check(['revoked:jti:x']), true, 'synchronously true on the revoking replica');
  await eventually(() => b.check(['revoked:jti:x']) === true, 'replica B learns the revocation');
  t.equal(await storeA.get('revoked:jti:x'), '1', 'Redis holds the truth');
});

t.test('a replica starting later rebuilds its mirror from the store', async (t) => {
  const stores: KeyValueStore[] = redisUrl ? [new RedisStore(redisUrl, { keyPrefix: `t:${randomBytes(6).toString('hex')}:` })] : [new MemoryStore()];
  for (const store of stores) {
    t.teardown(() => store.close());
    await store.set('revoked:sid:s1', '1', { ttlMs: 60_000 });
    const list = await RevocationList.start(store);
    t.teardown(() => list.close());
    t.equal(list.check(['revoked:sid:s1']), true);
    t.equal(list.check(['revoked:sid:other']), false);
  }
});

t.test('expired revocations stop counting', async (t) => {
  const store = new MemoryStore();
  const list = await RevocationList.start(store);
  t.teardown(async () => { await list.close(); await store.close(); });
  await list.revoke(['revoked:jti:short'], 30);
  t.equal(list.check(['revoked:jti:short']), true);
  await sleep(60);
  t.equal(list.check(['revoked:jti:short']), false);
});

t.test('while the real Redis subscription is down, checks ask Redis and see revocations made elsewhere; after resubscribing the mirror is rebuilt', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  // This replica reaches Redis through a proxy that can refuse new connections, so once
  // its subscriber connection is killed it stays down until the test lets it back.
  const target = new URL(redisUrl!);
  const proxy = await startTcpProxy(target.hostname, Number(target.port));
  const name = `revocation-test-${randomBytes(6).toString('hex')}`;
  const prefix = `t:${randomBytes(6).toString('hex')}:`;
  const store = new RedisStore(`redis://127.0.0.1:${proxy.port}?connectionName=${name}`, { keyPrefix: prefix });
  const elsewhere = new RedisStore(redisUrl!, { keyPrefix: prefix }); // another replica
  const admin = new Redis(redisUrl!);
  const list = await RevocationList.start(store);
  const other = await RevocationList.start(elsewhere);
  t.teardown(async () => {
    proxy.refuseNew(false); // a failed run must not leave the subscriber unable to close
    await list.close();
    await other.close();
    await store.close();
    await elsewhere.close();
    admin.disconnect();
    await proxy.cut();
  });
  t.equal(list.mirrored, true);
  t.equal(list.check(['revoked:sid:elsewhere']), false, 'answered from the mirror');

  // Kill this replica's subscriber connection in Redis itself, from a separate connection.
  const clients = (await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub') as string).split('\n').filter((line) => line.includes(` name=${name} `));
  t.equal(clients.length, 1, 'one subscriber connection of this replica');
  const id = /^id=(\d+) /.exec(clients[0]!)![1]!;
  proxy.refuseNew(true);
  t.equal(await admin.call('CLIENT', 'KILL', 'ID', id), 1, 'killed');
  await eventually(() => !list.mirrored, 'the mirror stops being trusted');

  // Another replica revokes a session; its pub/sub message cannot reach this one.
  await other.revoke(['revoked:sid:elsewhere'], 60_000);
  const answer = list.check(['revoked:sid:elsewhere']);
  t.type(answer, Promise, 'the check goes to Redis');
  t.equal(await answer, true, 'and sees the revocation made elsewhere');
  t.equal(await list.check(['revoked:sid:unrelated']), false, 'other sessions stay valid');

  proxy.refuseNew(false);
  await eventually(() => list.mirrored, 'resubscribed and the mirror rebuilt', 15_000);
  t.equal(list.check(['revoked:sid:elsewhere']), true, 'the revocation missed while down is in the rebuilt mirror (answered synchronously)');
  await other.revoke(['revoked:jti:after'], 60_000);
  await eventually(() => list.check(['revoked:jti:after']) === true, 'pub/sub delivers again');
});
