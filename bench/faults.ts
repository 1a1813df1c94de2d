// The fault scenarios of the fault tests (test/system/fault-scenarios.ts),
// run for their figures: requests served during each fault, errors seen,
// recovery times, acknowledged writes and purges lost. Needs PostgreSQL and
// Redis (and their server binaries for the restart scenario, which runs
// private servers). Results: printed and added to bench/results/faults.md
// (newest first); the tests assert the same checks and only print.
//
//   npm run bench:faults
//   node bench/faults.ts --scenarios databases,agent,replica
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { privateServicesMissing } from '../test/support/private-services.ts';
import { detectServices } from '../test/support/services.ts';
import { agentKilledMidPurge, databaseRestarts, replicaKilled, type FaultReport } from '../test/system/fault-scenarios.ts';
import { listFlag } from './lib/cli.ts';

const services = await detectServices();
if (!services.postgresUrl || !services.redisUrl) {
  console.error('bench:faults needs PostgreSQL and Redis (127.0.0.1:5432 and :6379, or TEST_POSTGRES_URL / TEST_REDIS_URL)');
  process.exit(1);
}
const { postgresUrl, redisUrl } = services;
const SCENARIOS: Record<string, (t: { teardown(fn: () => unknown): void }) => Promise<FaultReport>> = {
  databases: (t) => databaseRestarts(t),
  agent: (t) => agentKilledMidPurge(t, postgresUrl, redisUrl),
  replica: (t) => replicaKilled(t, postgresUrl, redisUrl),
};
const chosen = listFlag('scenarios', Object.keys(SCENARIOS).join(','));
const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' / ');
const loadBefore = load();

const sections: string[] = [];
let failed = 0;
for (const name of chosen) {
  const scenario = SCENARIOS[name];
  if (!scenario) throw new Error(`unknown scenario ${name} (${Object.keys(SCENARIOS).join(', ')})`);
  if (name === 'databases' && privateServicesMissing()) {
    sections.push(`### databases\n\nNot run: ${privateServicesMissing()} missing.\n`);
    continue;
  }
  const teardowns: (() => unknown)[] = [];
  const started = Date.now();
  console.log(`${name}: running`);
  try {
    const report = await scenario({ teardown: (fn) => teardowns.push(fn) });
    const checks = report.checks.map((c) => `- ${c.ok ? 'holds' : '**FAILS**'}: ${c.what}${c.detail ? ` (${c.detail})` : ''}`);
    failed += report.checks.filter((c) => !c.ok).length;
    sections.push([
      `### ${report.scenario}`, '',
      '| figure | value |', '|---|---:|',
      ...Object.entries(report.figures).map(([figure, value]) => `| ${figure} | ${value} |`), '',
      ...checks, '',
      `Scenario time ${((Date.now() - started) / 1000).toFixed(1)} s.`, '',
    ].join('\n'));
    console.log(sections.at(-1));
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}

const lines = [
  `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`, '',
  `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'CPU'}, Node ${process.version}; load average ${loadBefore} before, ${load()} after (1/5/15 min). `
    + 'Every process on loopback: control-plane and agent processes started as in the tests, viewers\' and API requests from this process. '
    + 'The host is shared with other work: times vary run to run.', '',
  ...sections,
];
const results = path.join(import.meta.dirname, 'results', 'faults.md');
const previous = fs.existsSync(results) ? fs.readFileSync(results, 'utf8').replace(/^# .*\n\n/, '') : '';
fs.writeFileSync(results, `# Fault scenarios (bench/faults.ts, newest first)\n\n${lines.join('\n')}\n${previous}`);
console.log(`written to ${path.relative(process.cwd(), results)}${failed ? `; ${failed} check(s) FAIL` : ''}`);
process.exit(failed ? 1 : 0);
