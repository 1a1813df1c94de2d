// Migrations apply cleanly to both PGlite and the real PostgreSQL, and leave
// a schema the entities agree with (no pending diff).
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { createTestDatabase } from '../../../test/support/database.ts';
import { detectServices } from '../../../test/support/services.ts';
import { entities } from '../capabilities.ts';
import { openDatabase, type Database } from './orm.ts';
import { migrationsList } from './migrations/index.ts';

async function checkMigrated(t: Test, db: Database) {
  const executed = await db.orm.migrator.getExecuted();
  t.same(executed.map((m: { name: string }) => m.name), migrationsList.map((m) => m.name), 'every migration applied, in order');
  t.same(await db.orm.migrator.getPending(), [], 'nothing pending');
  const diff = await db.orm.schema.getUpdateSchemaSQL({ wrap: false });
  t.equal(diff.trim(), '', `entities match the migrated schema${diff ? `:\n${diff}` : ''}`);
}

t.test('migrations on embedded PGlite', async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-mig-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const db = await openDatabase({ dataDir: dir, entities });
  t.equal(db.embedded, true);
  await checkMigrated(t, db);
  await db.close();
  // Reopening a migrated directory runs nothing again and keeps the data.
  const again = await openDatabase({ dataDir: dir, entities });
  await checkMigrated(t, again);
  await again.close();
});

const { postgresUrl } = await detectServices();
t.test('migrations on the real PostgreSQL', { skip: !postgresUrl && 'PostgreSQL not reachable' }, async (t) => {
  const test = await createTestDatabase({ postgresUrl });
  t.teardown(() => test.dispose());
  t.equal(test.real, true);
  await checkMigrated(t, test.db);
  await test.db.orm.migrator.down({ to: 0 });
  t.same(await test.db.orm.migrator.getExecuted(), [], 'down migrations undo everything');
  await test.db.orm.migrator.up();
  await checkMigrated(t, test.db);
});
