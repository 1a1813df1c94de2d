// One control-plane replica with the fixture job types (job-fixtures.ts), for
// the multi-process job tests: the same startControlPlane as main.ts, its
// configuration from the environment (DATABASE_URL, JOBS_POLL_MS, ...).
// Prints `replica ready <url>` once it listens; SIGTERM stops it cleanly.
import { loadConfig } from '../../control-plane/src/config/config.ts';
import { startControlPlane } from '../../control-plane/src/server.ts';
import { replicaJobs } from './job-fixtures.ts';

const config = loadConfig(process.env);
const cp = await startControlPlane(config, { extraJobs: replicaJobs });
console.log(`replica ready ${cp.url} pid ${process.pid}`);
process.once('SIGTERM', () => {
  void cp.close().then(() => process.exit(0), (error) => {
    console.error(error);
    process.exit(1);
  });
});
