// `npm run migrate`: applies pending migrations to DATABASE_URL (or the
// embedded database in DATA_DIR, through the running control plane when one
// holds it) and lists what ran. The control plane also migrates at start; this
// is for deployments that migrate as a separate step.
import { z } from 'zod';
import { ConfigError, loadConfig } from '../config/config.ts';
import { defineCommand, runCommand } from './command-channel.ts';

export const migrateCommand = defineCommand({
  name: 'migrate',
  args: z.strictObject({}),
  migrateOnOpen: false,
  async run({ db, io }) {
    const pending = await db.orm.migrator.getPending();
    if (!pending.length) io.out('No pending migrations.');
    for (const migration of await db.orm.migrator.up()) io.out(`Applied ${migration.name}`);
  },
});

if (import.meta.main) {
  let config;
  try {
    config = loadConfig(process.env, process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(`migrate: invalid configuration: ${error.message}`);
    process.exit(1);
  }
  process.exit(await runCommand(migrateCommand, {}, config));
}
