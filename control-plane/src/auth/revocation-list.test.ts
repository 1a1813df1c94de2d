import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { detectServices } from '../../../test/support/services.ts';
import { MemoryStore } from '../store/memory-store.ts';
import { RedisStore } from '../store/redis-store.ts';
import type { KeyValueStore } from '../store/store.ts';
import { RevocationList } from './revocation-list.ts';

const { redisUrl } = await detectServices();

async function eventually(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await check()) return;
    await sleep(10);
  }
  throw new Error(`never happened: ${what}`);
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

t.test('while the subscription is down, checks ask the store and see revocations made elsewhere', async (t) => {
  // A store whose subscription state the test controls, over an in-process store.
  const inner = new MemoryStore();
  let setLive: (live: boolean) => void = () => {};
  const overrides: Partial<KeyValueStore> = {
    onSubscriptionState(listener: (live: boolean) => void) {
      setLive = listener;
      listener(true);
      return () => {};
    },
    // Messages are lost while "down": publishing reaches nobody.
    publish: async () => {},
  };
  const store = new Proxy(inner, {
    get(target, prop) {
      if (prop in overrides) return overrides[prop as keyof KeyValueStore];
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  }) as KeyValueStore;
  const list = await RevocationList.start(store);
  t.teardown(async () => { await list.close(); await inner.close(); });
  setLive(false);
  t.equal(list.mirrored, false);
  await inner.set('revoked:sid:elsewhere', '1', { ttlMs: 60_000 }); // another replica's revocation, message lost
  t.equal(await list.check(['revoked:sid:elsewhere']), true, 'found by asking the store');
  setLive(true);
  await eventually(() => list.mirrored, 'mirror rebuilt');
  t.equal(list.check(['revoked:sid:elsewhere']), true, 'and now in the mirror');
});
