// In test mode a statement sent beside an open transaction — through an entity manager other than the
// transaction's — fails at once with TransactionGuardError, where the embedded database (one session)
// would wait for its own transaction forever. Runs on the embedded database, where the hang is real.
import t from 'tap';
import type { EntityManager } from '@mikro-orm/postgresql';
import { createTestDatabase } from '../../../test/support/database.ts';
import { detectServices } from '../../../test/support/services.ts';
import { besideTransaction, TransactionGuardError } from './transaction-guard.ts';

const test = await createTestDatabase({});
t.teardown(() => test.dispose());
const root = test.db.orm.em as EntityManager;
const count = async (em: EntityManager) => Number((await em.execute<{ n: number }[]>(`select count(*)::int as n from deployment`))[0]!.n);

t.test('statements through the transaction\'s entity manager run inside it, savepoints included', async (t) => {
  const counted = await root.fork().transactional(async (tx) => {
    const inner = await tx.transactional((nested) => count(nested as EntityManager));
    return [await count(tx as EntityManager), inner];
  });
  t.same(counted, [1, 1]);
});

t.test('a statement through another entity manager while a transaction is open throws, naming the statement; the connection is free afterwards', async (t) => {
  const outside = root.fork();
  const error = await root.fork().transactional(async (tx) => {
    await tx.execute(`select 1`);
    await count(outside);
  }).then(() => undefined, (e: unknown) => e);
  t.type(error, TransactionGuardError);
  t.match((error as Error).message, /"select count\(\*\)::int as n from deployment" was sent beside an open transaction.*transaction's entity manager/);
  t.equal(await count(root.fork()), 1, 'the connection is free again afterwards');
});

t.test('a new transaction opened beside an open one throws', async (t) => {
  const outside = root.fork();
  const error = await root.fork().transactional(() => outside.transactional(() => count(outside))).then(() => undefined, (e: unknown) => e);
  t.type(error, TransactionGuardError);
  t.match((error as Error).message, /^a new transaction was sent beside an open transaction/);
});

t.test('work the transaction leaves running may query once the transaction\'s callback is done', async (t) => {
  let later: Promise<number> | undefined;
  await root.fork().transactional(async () => {
    later = new Promise((resolve) => setImmediate(resolve)).then(() => count(root.fork()));
  });
  t.equal(await later, 1);
});

const { postgresUrl } = await detectServices();
t.test('besideTransaction lets a statement take a connection of its own on purpose (PostgreSQL: more than one session)', { skip: !postgresUrl && 'PostgreSQL not reachable' }, async (t) => {
  const server = await createTestDatabase({ postgresUrl });
  t.teardown(() => server.dispose());
  const em = server.db.orm.em as EntityManager;
  t.type(await em.fork().transactional(() => count(em.fork())).then(() => undefined, (e: unknown) => e), TransactionGuardError, 'on PostgreSQL too');
  t.equal(await em.fork().transactional(() => besideTransaction(() => count(em.fork()))), 1);
});
