// `npm run migrate`: applies pending migrations to DATABASE_URL (or the
// embedded database in DATA_DIR) and lists what ran. The control plane also
// migrates at start; this is for deployments that migrate as a separate step.
import { ConfigError, loadConfig } from '../config/config.ts';
import { openDatabase } from './orm.ts';

try {
  const config = loadConfig(process.env, process.argv.slice(2));
  const db = await openDatabase({ databaseUrl: config.DATABASE_URL, dataDir: config.dataDir, migrate: false });
  try {
    const pending = await db.orm.migrator.getPending();
    if (!pending.length) console.log('No pending migrations.');
    for (const migration of await db.orm.migrator.up()) console.log(`Applied ${migration.name}`);
  } finally {
    await db.close();
  }
} catch (error) {
  if (error instanceof ConfigError) {
    console.error(`migrate: invalid configuration: ${error.message}`);
    process.exit(1);
  }
  throw error;
}
