// The same behaviour from both implementations: Redis (when reachable) and in-process.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import t from 'tap';
import { detectServices } from '../../../test/support/services.ts';
import { namespacePrefix } from './index.ts';
import { MemoryStore } from './memory-store.ts';
import { ALONE_RECHECK_MS, COMMAND_TIMEOUT_MS, RedisStore } from './redis-store.ts';
import type { KeyValueStore } from './store.ts';

const { redisUrl } = await detectServices();
const makers: [string, () => KeyValueStore][] = [['memory', () => new MemoryStore()]];
if (redisUrl) makers.push(['redis', () => new RedisStore(redisUrl, { keyPrefix: `t:${randomBytes(6).toString('hex')}:` })]);
else t.comment('Redis not reachable: only the in-process store is tested here');

for (const [kind, make] of makers) {
  t.test(`${kind} store`, async (t) => {
    const store = make();
    t.teardown(() => store.close());

    t.test('set, get, del, exists', async (t) => {
      t.equal(await store.get('a'), null);
      t.equal(await store.set('a', '1'), true);
      t.equal(await store.get('a'), '1');
      t.equal(await store.exists('a'), true);
      t.same(await store.getMany(['a', 'missing']), ['1', null]);
      t.equal(await store.del('a', 'missing'), 1);
      t.equal(await store.exists('a'), false);
    });

    t.test('onlyIfAbsent sets once', async (t) => {
      t.equal(await store.set('nx', 'first', { onlyIfAbsent: true }), true);
      t.equal(await store.set('nx', 'second', { onlyIfAbsent: true }), false);
      t.equal(await store.get('nx'), 'first');
      await store.del('nx'); // no TTL: leave nothing behind in the shared Redis
    });

    t.test('ttl expires keys', async (t) => {
      await store.set('ttl', 'x', { ttlMs: 50 });
      t.equal(await store.get('ttl'), 'x');
      await sleep(120);
      t.equal(await store.get('ttl'), null);
      t.equal(await store.set('ttl', 'y', { ttlMs: 1000, onlyIfAbsent: true }), true, 'an expired key counts as absent');
    });

    t.test('incrWindow counts within a window and resets after it', async (t) => {
      const a = await store.incrWindow('w', 200);
      const b = await store.incrWindow('w', 200);
      t.equal(a.count, 1);
      t.equal(b.count, 2);
      t.ok(b.resetMs > 0 && b.resetMs <= 200);
      await sleep(250);
      t.equal((await store.incrWindow('w', 200)).count, 1);
    });

    t.test('takeWindow takes blocks of a budget, never past it, on the counter incrWindow counts', async (t) => {
      const results = await Promise.all(Array.from({ length: 8 }, () => store.takeWindow('lease', 10_000, 20, 3)));
      t.same(results.map((r) => r.granted).sort((x, y) => x - y), [0, 2, 3, 3, 3, 3, 3, 3], 'six blocks of 3 and the last 2, then nothing');
      t.equal(Math.max(...results.map((r) => r.count)), 20);
      t.ok(results.every((r) => r.resetMs > 0 && r.resetMs <= 10_000));
      t.equal((await store.incrWindow('lease', 10_000)).count, 21, 'the same counter');
      t.equal((await store.takeWindow('lease', 10_000, 20, 3)).granted, 0);
      const fresh = await store.takeWindow('lease-new', 200, 5, 3);
      t.same([fresh.granted, fresh.count], [3, 3]);
      t.ok(fresh.resetMs > 0 && fresh.resetMs <= 200, 'a new window expires');
      await store.del('lease', 'lease-new');
    });

    t.test('concurrent increments are not lost', async (t) => {
      const results = await Promise.all(Array.from({ length: 50 }, () => store.incrWindow('c', 10_000)));
      t.same(results.map((r) => r.count).sort((x, y) => x - y), Array.from({ length: 50 }, (_, i) => i + 1));
    });

    t.test('publish reaches subscribers until they unsubscribe', async (t) => {
      const got: string[] = [];
      const unsubscribe = await store.subscribe('chan', (m) => got.push(m));
      await store.publish('chan', 'one');
      for (let i = 0; i < 50 && got.length < 1; i++) await sleep(10);
      await unsubscribe();
      await store.publish('chan', 'two');
      await sleep(50);
      t.same(got, ['one']);
    });

    t.test('a failing subscriber neither keeps the message from the others nor fails the publish', async (t) => {
      const unsubscribeBad = await store.subscribe('other', () => { throw new Error('subscriber bug'); });
      const got: string[] = [];
      const unsubscribe = await store.subscribe('other', (m) => got.push(m));
      await store.publish('other', 'x');
      for (let i = 0; i < 50 && got.length < 1; i++) await sleep(10);
      await unsubscribeBad();
      await unsubscribe();
      t.same(got, ['x']);
    });

    t.test('ping answers', async (t) => {
      t.type(await store.ping(), 'number');
    });
  });
}

t.test('a Redis store pointed at a closed port fails commands instead of hanging', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  const store = new RedisStore('redis://127.0.0.1:1');
  t.teardown(() => store.close());
  await t.rejects(store.ping());
  await t.rejects(store.get('x'));
});

// Regression: a CI run's control-plane teardown hung for five minutes; QUIT and UNSUBSCRIBE waited without a bound
// for a Redis that had stopped answering (a subscriber's retries are unbounded).
t.test('a Redis store that stopped answering fails commands, and is closed and unsubscribed, within moments', { skip: !redisUrl && 'Redis not reachable', timeout: 15_000 }, async (t) => {
  const target = new URL(redisUrl!);
  let stalled = false;
  const sockets = new Set<net.Socket>();
  // Passes bytes through until stalled, then swallows them both ways (a Redis that accepts and never answers).
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 6379), target.hostname);
    sockets.add(client).add(upstream);
    client.on('data', (chunk) => { if (!stalled) upstream.write(chunk); });
    upstream.on('data', (chunk) => { if (!stalled) client.write(chunk); });
    for (const socket of [client, upstream]) socket.on('error', () => {}).on('close', () => { client.destroy(); upstream.destroy(); });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { for (const socket of sockets) socket.destroy(); proxy.close(); });
  const { port } = proxy.address() as net.AddressInfo;
  const store = new RedisStore(`redis://127.0.0.1:${port}`, { keyPrefix: `t:${randomBytes(6).toString('hex')}:` });
  const unsubscribe = await store.subscribe('chan', () => {});
  t.equal(await store.set('k', '1'), true, 'answers through the proxy');
  stalled = true;
  await t.rejects(store.get('k'), /timed out/i, `a command fails after ${COMMAND_TIMEOUT_MS} ms instead of waiting for ever`);
  await unsubscribe();
  await store.close();
  t.pass('unsubscribe and close returned although Redis no longer answers');
});

t.test('a Redis store hands its own messages to its subscribers once, at once, and still reaches other replicas', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  const keyPrefix = `test:${process.pid}:${Date.now()}:local:`;
  const a = new RedisStore(redisUrl!, { keyPrefix });
  const b = new RedisStore(redisUrl!, { keyPrefix });
  t.teardown(async () => { await a.close(); await b.close(); });
  const onA: string[] = [];
  const onB: string[] = [];
  await a.subscribe('chan', (m) => onA.push(m));
  await b.subscribe('chan', (m) => onB.push(m));
  const published = a.publish('chan', '{"n":1}');
  t.same(onA, ['{"n":1}'], 'delivered to the publishing store\'s subscribers before Redis answered');
  await published;
  for (let i = 0; i < 50 && onB.length < 1; i++) await sleep(10);
  await sleep(50); // time for Redis's echo of it to come back to a
  t.same(onA, ['{"n":1}'], 'the echo from Redis is not delivered a second time');
  t.same(onB, ['{"n":1}'], 'another store (replica) receives it through Redis, unmarked');

  // A publisher that is not one of these stores (redis-cli, another program): delivered as sent.
  const raw = new Redis(redisUrl!);
  t.teardown(() => raw.quit());
  await raw.publish(`${keyPrefix}chan`, 'plain');
  await raw.publish(`${keyPrefix}chan`, '\u0001no end mark');
  for (let i = 0; i < 50 && onA.length < 3; i++) await sleep(10);
  t.same(onA.slice(1), ['plain', '\u0001no end mark']);
});

t.test('a subscriber is told whether a message was published through its own store (local) or came from another process', async (t) => {
  const memory = new MemoryStore();
  t.teardown(() => memory.close());
  const inProcess: boolean[] = [];
  await memory.subscribe('chan', (_m, local) => inProcess.push(local));
  await memory.publish('chan', 'x');
  t.same(inProcess, [true], 'the in-process store: always local');
  if (!redisUrl) return;
  const keyPrefix = `test:${process.pid}:${Date.now()}:origin:`;
  const a = new RedisStore(redisUrl, { keyPrefix });
  const b = new RedisStore(redisUrl, { keyPrefix });
  t.teardown(async () => { await a.close(); await b.close(); });
  const onA: [string, boolean][] = [];
  await a.subscribe('chan', (m, local) => onA.push([m, local]));
  await b.subscribe('chan', () => {});
  await a.publish('chan', 'mine');
  await b.publish('chan', 'theirs');
  for (let i = 0; i < 50 && onA.length < 2; i++) await sleep(10);
  t.same(onA, [['mine', true], ['theirs', false]]);
});

t.test('a Redis store alone on a channel it subscribes to sends its messages to nobody else, until another store subscribes there', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  const keyPrefix = `test:${process.pid}:${Date.now()}:alone:`;
  const a = new RedisStore(redisUrl!, { keyPrefix });
  const b = new RedisStore(redisUrl!, { keyPrefix });
  const raw = new Redis(redisUrl!);
  t.teardown(async () => { await a.close(); await b.close(); raw.disconnect(); });
  const onA: [string, boolean][] = [];
  await a.subscribe('chan', (m, local) => onA.push([m, local]));
  await a.publish('chan', 'first'); // reaches a's own subscriber only: a learns it is alone
  const onRaw: string[] = [];
  raw.on('message', (_ch: string, m: string) => onRaw.push(m));
  await raw.subscribe(`${keyPrefix}chan`); // a listener that does not say it subscribed
  await a.publish('chan', 'second');
  await sleep(100);
  t.same(onA, [['first', true], ['second', true]], 'its own subscribers have every message, at once');
  t.same(onRaw, [], `alone, nothing went to Redis (a silent listener is found within ${ALONE_RECHECK_MS} ms)`);
  const onB: [string, boolean][] = [];
  await b.subscribe('chan', (m, local) => onB.push([m, local]));
  for (let i = 0; i < 50 && onRaw.length < 1; i++) await sleep(10); // b's word that it subscribed
  await a.publish('chan', 'third');
  for (let i = 0; i < 50 && onB.length < 1; i++) await sleep(10);
  t.same(onB, [['third', false]], 'the store that subscribed receives it, and not the word of subscribing');
  t.same(onA.at(-1), ['third', true]);
  t.equal(onA.length, 3, 'nor does a');
});

t.test('namespaces: stores of two deployments on one Redis server share no key and no channel', { skip: !redisUrl && 'Redis not reachable' }, async (t) => {
  const run = `${process.pid}-${Date.now()}`;
  const production = new RedisStore(redisUrl!, { keyPrefix: namespacePrefix(`production-${run}`) });
  const staging = new RedisStore(redisUrl!, { keyPrefix: namespacePrefix(`staging-${run}`) });
  t.teardown(async () => {
    await production.del('rl:x');
    await production.close();
    await staging.close();
  });
  const onStaging: string[] = [];
  const onProduction: string[] = [];
  await staging.subscribe('cdn:purge-submitted', (m) => onStaging.push(m));
  await production.subscribe('cdn:purge-submitted', (m) => onProduction.push(m));
  await production.set('rl:x', '1', { ttlMs: 60_000 });
  t.equal(await staging.get('rl:x'), null, 'a key of one is not the other\'s');
  await production.publish('cdn:purge-submitted', '{"sequence":1}');
  for (let i = 0; i < 50 && onProduction.length < 1; i++) await sleep(10);
  await sleep(100); // time for Redis to deliver it anywhere it would go
  t.same(onProduction, ['{"sequence":1}']);
  t.same(onStaging, [], 'nor a message');
});
