// Process entry of the control plane: `npm run control-plane` (or `npm start`
// for control plane + edge agent together).
//
// On the embedded database this process owns the data directory: it holds its
// lock while it runs and runs commands (admin:create, migrate, agent-token, edge:demo-endpoint, cdn:edge-certificate) for other
// processes on its command socket. On an empty database it creates the first
// superadmin and prints the credentials once, on stdout (never into the log).
import { createAdminCommand, ensureFirstSuperadmin } from './admin/create-admin.ts';
import { syncRoleCatalog } from './auth/permissions/permission-service.ts';
import { entities } from './capabilities.ts';
import { ConfigError, loadConfig, type Config } from './config/config.ts';
import { CommandError, serveCommands } from './db/command-channel.ts';
import { controlPlaneApplicationName } from './db/control-plane-presence.ts';
import { DataDirBusyError } from './db/data-dir-lock.ts';
import { EmbeddedDatabaseError } from './db/embedded-postgres.ts';
import { migrateCommand } from './db/migrate-cli.ts';
import { demoEndpointCommand } from './cdn-config/index.ts';
import { agentTokenCommand } from './edge-channel/index.ts';
import { edgeCertificateCommand } from './cdn/edge-certificate-command.ts';
import { openDatabase, type Database } from './db/orm.ts';
import { createLogger } from './http/logger.ts';
import { tuneHeap, YOUNG_GENERATION_FLAG, youngGenerationCapped } from './heap-tuning.ts';
import { startControlPlane } from './server.ts';

/** Commands other processes may run through this one while it owns the embedded database. */
const commands = [createAdminCommand, migrateCommand, agentTokenCommand, demoEndpointCommand, edgeCertificateCommand];

// A long-running server: full collections come sooner than V8's default (heap-tuning.ts).
tuneHeap();

function fatal(message: string): never {
  console.error(`control-plane: ${message}`);
  process.exit(1);
}

let config: Config;
try {
  config = loadConfig(process.env, process.argv.slice(2));
} catch (error) {
  if (error instanceof ConfigError) fatal(`invalid configuration: ${error.message}`);
  throw error;
}

const log = createLogger(config.LOG_LEVEL);
// Where this control plane answers, as commands run in their own process find it (control-plane-presence.ts).
const advertisedUrl = config.PUBLIC_URL ? config.publicUrl : config.PORT ? `http://localhost:${config.PORT}` : undefined;
let db: Database;
try {
  db = await openDatabase({
    databaseUrl: config.DATABASE_URL,
    dataDir: config.dataDir,
    entities,
    log,
    applicationName: advertisedUrl && controlPlaneApplicationName(advertisedUrl),
    embeddedOptions: {
      role: 'control-plane',
      whenBusy(holder) {
        // Another control plane will not let go; a command (admin:create, migrate) soon will.
        if (holder?.role === 'control-plane') return false;
        console.error(`control-plane: ${config.dataDir} is in use by ${holder ? `${holder.role} (pid ${holder.pid})` : 'another process'}; waiting for it to finish...`);
        return true;
      },
    },
  });
} catch (error) {
  if (error instanceof EmbeddedDatabaseError) fatal(error.message);
  if (error instanceof DataDirBusyError) {
    fatal(`${config.dataDir} is in use by ${error.holder ? `another ${error.holder.role} (pid ${error.holder.pid})` : 'another process'}; stop it, or give this one its own --data-dir`);
  }
  throw error;
}

// Before the HTTP server answers, so whoever waits for readiness (npm start) has read them.
if (config.NODE_ENV !== 'production') {
  await syncRoleCatalog(db.orm.em.fork());
  const first = await ensureFirstSuperadmin(db, config.ADMIN_EMAIL).catch((error: unknown) => {
    if (error instanceof CommandError) fatal(`no first superadmin: ${error.message} Or set ADMIN_EMAIL to another address.`);
    throw error;
  });
  if (first) {
    console.log([
      'First superadmin created (the password is shown this once; store it safely):',
      `  e-mail:   ${first.email}`,
      `  password: ${first.password}`,
    ].join('\n'));
  }
}

const controlPlane = await startControlPlane(config, { log, db });
const { store } = controlPlane.app;
const port = Number(new URL(controlPlane.url).port);
const url = config.PUBLIC_URL ? config.publicUrl : `http://localhost:${port}`;
const commandServer = await serveCommands({ db, commands, publicUrl: url, log, services: controlPlane.app });
log.info({
  url,
  database: db.embedded ? `embedded PGlite in ${db.embeddedDir}` : 'PostgreSQL',
  store: store.kind === 'redis' ? 'Redis' : 'in-process (single replica only)',
  commands: commandServer?.path,
}, 'control plane listening');
// After the start, so a start that fails says only why.
if (!youngGenerationCapped()) {
  log.warn({ flag: YOUNG_GENERATION_FLAG }, 'started without a cap on the young generation (V8 may grow it to 128 MB instead of 32): start with `npm run control-plane`, or pass the flag to node (heap-tuning.ts)');
}

let stopping = false;
async function shutdown(reason: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ reason }, 'shutting down: finishing in-flight requests');
  try {
    await commandServer?.close();
    await controlPlane.close();
    await db.close();
    log.info('stopped');
    process.exit(0);
  } catch (error) {
    log.error({ err: error }, 'shutdown failed');
    process.exit(1);
  }
}
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void shutdown(signal));
// Started by `npm start` with an IPC channel: stop when that parent goes away, however it ended.
if (process.connected) process.on('disconnect', () => void shutdown('parent exited'));
