// Process entry of the control plane: `npm run control-plane` (or `npm start`
// for control plane + edge agent together).
import { ConfigError, loadConfig, type Config } from './config/config.ts';
import { createLogger } from './http/logger.ts';
import { startControlPlane } from './server.ts';

let config: Config;
try {
  config = loadConfig(process.env, process.argv.slice(2));
} catch (error) {
  if (error instanceof ConfigError) {
    console.error(`control-plane: invalid configuration: ${error.message}`);
    process.exit(1);
  }
  throw error;
}

const log = createLogger(config.LOG_LEVEL);
const controlPlane = await startControlPlane(config, { log });
const { db, store } = controlPlane.app;
log.info({
  url: controlPlane.url,
  database: db.embedded ? `embedded PGlite in ${config.dataDir}/pg` : 'PostgreSQL',
  store: store.kind === 'redis' ? 'Redis' : 'in-process (single replica only)',
}, 'control plane listening');

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down: finishing in-flight requests');
    try {
      await controlPlane.close();
      log.info('stopped');
      process.exit(0);
    } catch (error) {
      log.error({ err: error }, 'shutdown failed');
      process.exit(1);
    }
  });
}
