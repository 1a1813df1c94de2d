// A control-plane replica killed with agents on it: they move to the other
// and lose no purge (issue 26 item 5); see fault-scenarios.ts.
import t from 'tap';
import { detectServices } from '../support/services.ts';
import { replicaKilled } from './fault-scenarios.ts';
import { assertReport } from './fault-report.ts';

const services = await detectServices();
t.test('a replica killed with agents on it: they move to the other replica and every purge completes', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis', timeout: 120_000 }, async (t) => {
  assertReport(t, await replicaKilled(t, services.postgresUrl!, services.redisUrl!));
});
