// Renewal throughput of the billing clock (issue 10): how many due
// subscriptions per second the production renewal path (billing-clock.ts)
// invoices, charges and settles on PostgreSQL with two scheduler processes
// at once, and whether anything was renewed or charged twice.
//
//   seed       a fresh sp_bench_billing_* database, migrated, filled with set-based SQL:
//              N users, each with one due monthly subscription (plans in EUR and JPY),
//              payment methods of the test gateway (most succeed, 1 in 20 declines,
//              some in FR with a tax rate), 1 in 100 with an account balance, 1 in 100
//              with a once-only coupon, 1 in 500 complimentary (no payment method);
//              kept as a template and copied for each measurement
//   baseline   two processes running the bare claim-and-update loop in raw `pg`
//              (SKIP LOCKED batches, one UPDATE … RETURNING per batch): what PostgreSQL
//              itself costs, so the engine's share shows
//   engine     two processes running runBillingClock (the production code) against the
//              same data, each with its own test gateway that logs every real charge by key
//
// Clock: from the moment both processes are told to start (first claim) until the
// last one finds no due work left (last settle). Doubles are read afterwards from
// the database (invoices per subscription and period, renewal invoices per
// subscription) and from both processes' charge logs (real charges per key).
// Run: npm run bench:billing -- [--subscriptions 100000] [--batch <baseline rows per claim>] [--rounds 1]
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import pg from 'pg';
import { CHARGE_CONCURRENCY, RENEWAL_BATCH } from '../control-plane/src/billing/billing-clock.ts';
import { numberFlag } from './lib/cli.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const SUBSCRIPTIONS = numberFlag('subscriptions', 100_000);
/** Rows per claim of the baseline (the engine's batch is its own, RENEWAL_BATCH). */
const BATCH = numberFlag('batch', RENEWAL_BATCH);
const ROUNDS = numberFlag('rounds', 1);
const PG_ADMIN = process.env.BENCH_POSTGRES_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const PROCESSES = 2;

const dueWork = `
  select (select count(*) from billing_subscription where status in ('trialing', 'active') and next_billing_date <= $1)
       + (select count(*) from billing_invoice where status = 'open' and next_attempt_at <= $1) as n`;

// ---- child mode: one scheduler process ----------------------------------------

interface ChildReport { startedAt: number; endedAt: number; passes: number; summary?: Record<string, number> }

async function waitForGo(): Promise<void> {
  console.log('ready');
  await new Promise<void>((resolve) => process.stdin.setEncoding('utf8').on('data', (chunk: string) => { if (chunk.includes('go')) resolve(); }));
}

/** The engine: the production billing clock with the test gateway, logging real charges per key. */
async function engineChild(url: string, logFile: string): Promise<void> {
  const { entities } = await import('../control-plane/src/capabilities.ts');
  const { openDatabase } = await import('../control-plane/src/db/orm.ts');
  const { systemClock } = await import('../control-plane/src/core/clock.ts');
  const { systemContext } = await import('../control-plane/src/core/request-context.ts');
  const { DeferredTasks } = await import('../control-plane/src/jobs/deferred-tasks.ts');
  const { TestPaymentGateway } = await import('../control-plane/src/billing/gateway/test-gateway.ts');
  const { runBillingClock } = await import('../control-plane/src/billing/billing-clock.ts');
  const log = pino({ level: 'silent' });
  const db = await openDatabase({ databaseUrl: url, dataDir: os.tmpdir(), entities, migrate: false, poolMax: 4 });
  const gateway = new TestPaymentGateway();
  const charges: [string, string][] = [];
  const app = {
    db, log, clock: systemClock, deferred: new DeferredTasks(log),
    mailer: { send: async () => ({ messageId: 'bench' }) },
    paymentGateway: {
      name: gateway.name,
      attach: gateway.attach.bind(gateway),
      refund: gateway.refund.bind(gateway),
      detach: gateway.detach.bind(gateway),
      async charge(input: Parameters<typeof gateway.charge>[0]) {
        const result = await gateway.charge(input);
        if (result.status === 'succeeded') charges.push([input.idempotencyKey, result.chargeId]);
        return result;
      },
    },
  } as never;
  const summary: Record<string, number> = {};
  await waitForGo();
  const startedAt = Date.now();
  let passes = 0;
  for (;;) {
    passes++;
    const pass = await runBillingClock(app, systemContext(app));
    for (const [k, v] of Object.entries(pass)) summary[k] = (summary[k] ?? 0) + v;
    if (Object.values(pass).some((n) => n > 0)) continue;
    // Nothing claimable: either done, or the other process holds the rest.
    const [row] = await db.orm.em.fork().getConnection().execute(dueWork.replaceAll('$1', '?'), [new Date(), new Date()]);
    if (Number(row.n) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const endedAt = Date.now();
  await (app as { deferred: { idle(): Promise<void> } }).deferred.idle();
  fs.writeFileSync(logFile, JSON.stringify(charges));
  await db.close();
  console.log(JSON.stringify({ startedAt, endedAt, passes, summary } satisfies ChildReport));
}

/** The baseline: claim a batch with SKIP LOCKED and move it a month on, one statement per batch, in raw pg. */
async function baselineChild(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await waitForGo();
  const startedAt = Date.now();
  let passes = 0;
  for (;;) {
    passes++;
    const now = new Date();
    const { rowCount } = await client.query(
      `update billing_subscription s
          set current_period_start = s.current_period_end,
              current_period_end = s.current_period_end + interval '1 month',
              next_billing_date = s.current_period_end + interval '1 month',
              updated_at = $1, version = s.version + 1
        where s.id in (select id from billing_subscription
                        where status in ('trialing', 'active') and next_billing_date <= $1
                        limit $2 for update skip locked)
        returning s.id`, [now, BATCH]);
    if (rowCount) continue;
    const { rows } = await client.query(dueWork, [now]);
    if (Number(rows[0].n) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const endedAt = Date.now();
  await client.end();
  console.log(JSON.stringify({ startedAt, endedAt, passes } satisfies ChildReport));
}

if (process.argv[2] === '--engine') await engineChild(process.argv[3]!, process.argv[4]!);
else if (process.argv[2] === '--baseline') await baselineChild(process.argv[3]!);
else await main();

// ---- the benchmark -------------------------------------------------------------

function urlOf(name: string): string {
  const url = new URL(PG_ADMIN);
  url.pathname = `/${name}`;
  return url.toString();
}

async function seed(name: string): Promise<void> {
  const { openDatabase } = await import('../control-plane/src/db/orm.ts');
  const db = await openDatabase({ databaseUrl: urlOf(name), dataDir: os.tmpdir(), poolMax: 1 });
  await db.close();
  const client = new pg.Client({ connectionString: urlOf(name) });
  await client.connect();
  try {
    await client.query('begin');
    // Plans: monthly in EUR and in JPY.
    await client.query(`
      insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices, max_quality, has_downloads, has_ads, is_active, created_at, updated_at)
      values ('00000000-0000-4000-8000-000000000e00', 'Standard EUR', 'svod', 999, 'EUR', 'monthly', 4, 2, 5, 'HD', false, false, true, now(), now()),
             ('00000000-0000-4000-8000-000000000a00', 'Standard JPY', 'svod', 1490, 'JPY', 'monthly', 4, 2, 5, 'HD', false, false, true, now(), now())`);
    await client.query(`insert into billing_tax_rate (country, rate_bp, updated_at) values ('FR', 2000, now())`);
    await client.query(`
      insert into billing_coupon (id, code, discount_type, percent_off_bp, max_redemptions_per_user, redemption_count, valid_from, status, created_at, updated_at)
      values ('00000000-0000-4000-8000-00000000c000', 'BENCH20', 'percent', 2000, null, 0, now() - interval '1 year', 'active', now(), now())`);
    await client.query(`
      insert into app_user (id, email, email_verified, status, notification_preferences, created_at, updated_at)
      select ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'bench' || i || '@example.com', true, 'active', '{}'::jsonb, now(), now()
      from generate_series(1, $1::int) as i`, [SUBSCRIPTIONS]);
    // 1 in 20 declines; 1 in 10 of the rest is issued in France (taxed).
    await client.query(`
      insert into billing_payment_method (id, user_id, gateway, gateway_payment_method_id, type, brand, last4, exp_month, exp_year, billing_country, is_default, created_at, updated_at)
      select ('00000000-0000-4000-9000-' || lpad(to_hex(i), 12, '0'))::uuid, ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'test',
             'pm_test_' || case when i % 20 = 0 then 'declined' when i % 10 = 7 then 'fr' else 'visa' end || '_203012_'
               || translate(lpad(to_hex(i), 16, '0'), '0123456789', 'ghijklmnop'),
             'card', 'visa', case when i % 20 = 0 then '0341' when i % 10 = 7 then '0003' else '4242' end, 12, 2030,
             case when i % 10 = 7 and i % 20 <> 0 then 'FR' else 'US' end, true, now(), now()
      from generate_series(1, $1::int) as i`, [SUBSCRIPTIONS]);
    // Every subscription is due a minute ago; 1 in 4 in JPY; 1 in 500 complimentary; 1 in 100 with a coupon.
    await client.query(`
      insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
                                        auto_renew, current_period_start, current_period_end, next_billing_date, cancel_at_period_end, payment_method_id, coupon_id, created_at, updated_at)
      select ('00000000-0000-4000-a000-' || lpad(to_hex(i), 12, '0'))::uuid, ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
             case when i % 4 = 0 then '00000000-0000-4000-8000-000000000a00'::uuid else '00000000-0000-4000-8000-000000000e00'::uuid end, 'svod', 'active',
             case when i % 4 = 0 then 1490 else 999 end, case when i % 4 = 0 then 'JPY' else 'EUR' end, 'monthly', 4, 2, 5,
             true, date_trunc('second', now()) - interval '1 month 1 minute', date_trunc('second', now()) - interval '1 minute', date_trunc('second', now()) - interval '1 minute', false,
             case when i % 500 = 3 then null else ('00000000-0000-4000-9000-' || lpad(to_hex(i), 12, '0'))::uuid end,
             case when i % 100 = 2 then '00000000-0000-4000-8000-00000000c000'::uuid end, now() - interval '1 month', now()
      from generate_series(1, $1::int) as i`, [SUBSCRIPTIONS]);
    // 1 in 100 holds a balance in the subscription's currency: every other one covers the renewal, the rest part of it.
    await client.query(`
      insert into billing_account_balance (id, user_id, currency, balance_minor, updated_at)
      select gen_random_uuid(), ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, case when i % 4 = 0 then 'JPY' else 'EUR' end,
             case when i % 200 = 1 then 5000 else 300 end, now()
      from generate_series(1, $1::int) as i where i % 100 = 1`, [SUBSCRIPTIONS]);
    await client.query('commit');
    await client.query('vacuum analyze');
  } finally {
    await client.end();
  }
}

async function startChild(args: string[]): Promise<{ child: ChildProcess; report: Promise<ChildReport> }> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), ...args, '--batch', String(BATCH)], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  let ready!: () => void;
  const isReady = new Promise<void>((resolve) => (ready = resolve));
  const report = new Promise<ChildReport>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      if (out.includes('ready')) ready();
    });
    child.once('exit', (code) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      if (code === 0 && last.startsWith('{')) resolve(JSON.parse(last));
      else reject(new Error(`scheduler exited with ${code}: ${out.slice(-500)}`));
    });
  });
  report.catch(() => ready());
  await isReady;
  return { child, report };
}

/** Runs PROCESSES children at once; returns the wall clock from the first start to the last end and their reports. */
async function race(argsOf: (n: number) => string[]): Promise<{ seconds: number; reports: ChildReport[] }> {
  const children: { child: ChildProcess; report: Promise<ChildReport> }[] = [];
  for (let n = 0; n < PROCESSES; n++) children.push(await startChild(argsOf(n)));
  for (const { child } of children) child.stdin!.end('go\n');
  const reports = await Promise.all(children.map((c) => c.report)).catch((error: unknown) => {
    for (const { child } of children) if (child.exitCode === null) child.kill('SIGTERM');
    throw error;
  });
  const seconds = (Math.max(...reports.map((r) => r.endedAt)) - Math.min(...reports.map((r) => r.startedAt))) / 1000;
  return { seconds, reports };
}

async function one(client: pg.Client, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await client.query(sql, params);
  return Number(Object.values(rows[0])[0]);
}

async function main(): Promise<void> {
  const base = `sp_bench_billing_${process.pid}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN });
  await admin.connect();
  const lines: string[] = [];
  const say = (line: string) => {
    console.log(line);
    lines.push(line);
  };
  const created: string[] = [];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sp-bench-billing-'));
  try {
    const seedStarted = performance.now();
    await admin.query(`create database ${base}_seed`);
    created.push(`${base}_seed`);
    await seed(`${base}_seed`);
    console.log(`seeded ${SUBSCRIPTIONS} due subscriptions in ${((performance.now() - seedStarted) / 1000).toFixed(1)} s`);
    say(`${SUBSCRIPTIONS} due subscriptions, ${PROCESSES} scheduler processes, engine batch ${RENEWAL_BATCH} (gateway calls ${CHARGE_CONCURRENCY} at a time), baseline batch ${BATCH}, ${os.cpus().length} cores, load average before ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

    for (let round = 1; round <= ROUNDS; round++) {
      const baselineDb = `${base}_baseline_${round}`;
      await admin.query(`create database ${baselineDb} template ${base}_seed`);
      created.push(baselineDb);
      const baseline = await race(() => ['--baseline', urlOf(baselineDb)]);
      const baselineRate = SUBSCRIPTIONS / baseline.seconds;
      await admin.query(`drop database if exists ${baselineDb} with (force)`);

      const engineDb = `${base}_engine_${round}`;
      await admin.query(`create database ${engineDb} template ${base}_seed`);
      created.push(engineDb);
      const logs = [0, 1].map((n) => path.join(dir, `charges-${round}-${n}.json`));
      const engine = await race((n) => ['--engine', urlOf(engineDb), logs[n]!]);
      const client = new pg.Client({ connectionString: urlOf(engineDb) });
      await client.connect();
      try {
        const renewals = await one(client, `select count(*) from billing_invoice where billing_reason = 'subscription_cycle'`);
        const doubleInvoices = await one(client, `select count(*) from (select 1 from billing_invoice where status <> 'void' group by subscription_id, period_start having count(*) > 1) d`);
        const renewedTwice = await one(client, `select count(*) from (select 1 from billing_invoice where billing_reason = 'subscription_cycle' group by subscription_id having count(*) > 1) d`);
        const missed = await one(client, `select count(*) from billing_subscription s where not exists (select 1 from billing_invoice i where i.subscription_id = s.id)`);
        const paid = await one(client, `select count(*) from billing_invoice where status = 'paid'`);
        const declined = await one(client, `select count(*) from billing_invoice where status = 'open' and attempt_count = 1`);
        const pending = await one(client, `select count(*) from billing_invoice_charge where status = 'pending'`);
        const notices = await one(client, `select count(*) from notification where type = 'payment_failed'`);
        const gapless = await one(client, `select count(*) = max(substring(invoice_number from 10)::int) from billing_invoice where invoice_number is not null`);
        const byKey = new Map<string, Set<string>>();
        for (const file of logs) {
          for (const [key, chargeId] of JSON.parse(fs.readFileSync(file, 'utf8')) as [string, string][]) {
            byKey.set(key, (byKey.get(key) ?? new Set()).add(chargeId));
          }
        }
        const doubleCharges = [...byKey.values()].filter((ids) => ids.size > 1).length;
        const rate = renewals / engine.seconds;
        say(`round ${round}: baseline (raw pg claim-and-update, ${PROCESSES} processes): ${baselineRate.toFixed(0)} renewals/s (${baseline.seconds.toFixed(2)} s)`);
        say(`round ${round}: engine (billing clock, ${PROCESSES} processes): ${rate.toFixed(0)} renewals/s (${renewals} renewals in ${engine.seconds.toFixed(2)} s; passes ${engine.reports.map((r) => r.passes).join(' + ')}; invoiced per process ${engine.reports.map((r) => r.summary?.invoiced ?? 0).join(' + ')}); engine/baseline ${(rate / baselineRate * 100).toFixed(1)} %`);
        say(`round ${round}: paid ${paid}, declined ${declined} (payment_failed notifications ${notices}), pending charges left ${pending}, subscriptions never invoiced ${missed}`);
        say(`round ${round}: doubles: invoices per subscription-period > 1: ${doubleInvoices}; real charges per key > 1: ${doubleCharges} (${byKey.size} keys charged); subscriptions renewed twice: ${renewedTwice}; invoice numbers gapless: ${gapless === 1 ? 'yes' : 'NO'}`);
      } finally {
        await client.end();
      }
      await admin.query(`drop database if exists ${engineDb} with (force)`);
    }
    say(`load average after ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    const file = path.join(here, 'results', 'billing.md');
    const head = fs.existsSync(file) ? '' : '# bench/billing-renewals.ts (npm run bench:billing)\n\nNewest last.\n';
    fs.appendFileSync(file, `${head}\n## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC (${process.env.BENCH_LABEL ?? 'run'})\n\n${lines.map((l) => `- ${l}`).join('\n')}\n`);
  } finally {
    for (const name of created) await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
