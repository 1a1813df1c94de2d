// An agent killed mid-purge catches up before it serves from its cache again
// (issue 26 item 5); see fault-scenarios.ts.
import t from 'tap';
import { detectServices } from '../support/services.ts';
import { agentKilledMidPurge } from './fault-scenarios.ts';
import { assertReport } from './fault-report.ts';

const services = await detectServices();
t.test('an agent killed in the middle of a run of purges never serves a purged copy once back, and every purge completes', { skip: !services.postgresUrl && 'needs PostgreSQL', timeout: 120_000 }, async (t) => {
  assertReport(t, await agentKilledMidPurge(t, services.postgresUrl!, services.redisUrl));
});
