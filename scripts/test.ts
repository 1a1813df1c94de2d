// The test command: finds PostgreSQL and Redis (or falls back to the embedded
// defaults, and says so), prepares a migrated template database once, runs
// the tap suite, and ends on a plain `N passed, N failed` line.
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import { createTemplateDatabase, createTemplateDataDir, dropDatabase } from '../test/support/database.ts';
import { detectServices } from '../test/support/services.ts';
import { withoutNul } from './nul-free.ts';

const services = await detectServices();
const env: Record<string, string> = { ...process.env as Record<string, string>, TEST_SERVICES_DETECTED: '1', NODE_ENV: 'test' };
env.TEST_POSTGRES_URL = services.postgresUrl ?? '';
env.TEST_REDIS_URL = services.redisUrl ?? '';
// Every Node process of the run (test files and all they start) refuses to reach beyond loopback (test/support/loopback-only.mjs).
const guard = new URL('../test/support/loopback-only.mjs', import.meta.url);
env.NODE_OPTIONS = [process.env.NODE_OPTIONS, `--import=${guard.href}`].filter(Boolean).join(' ');

let templateDb: string | undefined;
let templateDir: string | undefined;
if (services.postgresUrl) {
  templateDb = await createTemplateDatabase(services.postgresUrl);
  env.TEST_PG_TEMPLATE = templateDb;
} else {
  templateDir = await createTemplateDataDir();
  env.TEST_PGLITE_TEMPLATE = templateDir;
}
console.log(
  `Test services: ${services.postgresUrl ? `PostgreSQL at ${new URL(services.postgresUrl).host}` : 'PostgreSQL not reachable, using embedded PGlite'}; ` +
  `${services.redisUrl ? `Redis at ${new URL(services.redisUrl).host}` : 'Redis not reachable, using the in-process store'}.`,
);

const tapArgs = process.argv.slice(2);
const child = spawn(process.execPath, ['node_modules/tap/dist/esm/run.mjs', ...tapArgs], { env, stdio: ['inherit', 'pipe', 'pipe'] });
let tail = '';
// Every `not ok` line (a failed file, subtest or assertion, with its indentation) is repeated just above the
// closing line, so a log that keeps only the end of the run still names what failed.
const failures: string[] = [];
let partial = '';
child.stderr.on('data', (raw: Buffer) => process.stderr.write(withoutNul(raw)));
child.stdout.on('data', (raw: Buffer) => {
  const chunk = withoutNul(raw);
  process.stdout.write(chunk);
  const text = chunk.toString('utf8');
  tail = (tail + text).slice(-4096);
  const lines = (partial + text).split('\n');
  partial = lines.pop() ?? '';
  for (const line of lines) if (/^\s*not ok /.test(line) && !/# TODO/.test(line) && failures.length < 200) failures.push(line);
});
const exitCode: number = await new Promise((resolve) => child.on('close', (code) => resolve(code ?? 1)));

if (templateDb) await dropDatabase(services.postgresUrl!, templateDb).catch(() => {});
if (templateDir) await fs.rm(templateDir, { recursive: true, force: true });

// tap's closing summary: `# { total: 5, pass: 3, fail: 1, skip: 1 }`
const summaries = [...tail.matchAll(/# \{ total: (\d+)(?:, pass: (\d+))?(?:, fail: (\d+))?(?:, todo: (\d+))?(?:, skip: (\d+))?/g)];
const last = summaries.at(-1);
if (!last) {
  console.log('0 passed, 1 failed');
  console.error('tap printed no summary: the run did not complete');
  process.exit(exitCode || 1);
}
const passed = Number(last[2] ?? 0);
const failed = Number(last[3] ?? 0);
const skipped = Number(last[5] ?? 0);
if (failures.length > 0) console.log(['# what failed:', ...failures].join('\n'));
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 ? 1 : exitCode);
