// PostgreSQL and Redis restarted during traffic (issue 26 item 5): private
// servers of this file's own (the machine's shared ones serve the other test
// files), a control-plane process and an agent; see fault-scenarios.ts.
import t from 'tap';
import { privateServicesMissing } from '../support/private-services.ts';
import { databaseRestarts } from './fault-scenarios.ts';
import { assertReport, privateServersSkip } from './fault-report.ts';

const skip = privateServersSkip(privateServicesMissing());
t.test('PostgreSQL and Redis restarted during traffic: agents serve, the control plane recovers without a restart, no acknowledged write lost', { skip, timeout: 120_000 }, async (t) => {
  assertReport(t, await databaseRestarts(t));
});
