// Personal-data export through the real server on PostgreSQL and Redis
// (document 1 §4.1, part 8; DESIGN.md §5): one export being prepared per
// account, the background job and its archive, the signed 24-hour link
// (refused when expired by the clock or changed by one character), the
// e-mail, the housekeeping of expired archives, and refusals that store nothing.
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import t, { type Test } from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, enableMfa, login, messagesTo, query, RELAXED_LIMITS, type TestAccount,
} from '../../../test/support/auth.ts';
import { DAY, HOUR, ManualClock, MINUTE, SECOND } from '../core/clock.ts';
import { EXPORT_ATTEMPTS, exportDir } from './data-export-service.ts';

const clock = new ManualClock();
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const admin = await createAdmin(cp);

const requestExport = (token: string, options: { json?: unknown; query?: string } = {}) =>
  cp.request('POST', `/v1/users/me/data-export${options.query ?? ''}`, { headers: bearer(token), json: options.json });
const readExport = (token: string, qs = '') => cp.request('GET', `/v1/users/me/data-export${qs}`, { headers: bearer(token) });
/** The path and query of an absolute link (PUBLIC_URL names port 0 in tests), fetched from this server. */
const download = (url: string) => {
  const u = new URL(url);
  return cp.request('GET', `${u.pathname}${u.search}`);
};
const exportRows = (userId: string) => query<{ id: string; status: string; file_name: string | null; size_bytes: number | null; error: string | null }>(
  cp, 'select id, status, file_name, size_bytes::int as size_bytes, error from account_data_export where user_id = ? order by requested_at', [userId]);

/** A fresh login: moving the clock by hours expires access tokens (15 minutes). */
const fresh = async (account: TestAccount) => ({ ...account, ...(await login(cp, account.email, account.password)) });

/** Requests an export and runs the job: the ready record, as GET shows it. */
async function readyExport(t: Test, account: TestAccount) {
  const accepted = await requestExport(account.accessToken);
  t.equal(accepted.status, 202, accepted.text);
  await cp.app.jobs.runDue();
  const ready = await readExport(account.accessToken);
  t.equal(ready.status, 200);
  t.equal(ready.body.data.status, 'ready', ready.text);
  return ready.body.data as { id: string; status: string; download_url: string; expires_at: string; completed_at: string; size_bytes: number };
}

t.test('POST /v1/users/me/data-export accepts (202, bare job) and GET follows it to ready with a signed link, e-mailed too', async (t) => {
  const me = await createLoggedInUser(cp, { display_name: 'Ada Export' });
  t.equal((await readExport(me.accessToken)).status, 404, 'no export yet');

  const accepted = await requestExport(me.accessToken);
  t.equal(accepted.status, 202);
  t.same(Object.keys(accepted.body).sort(), ['completed_at', 'download_url', 'error', 'expires_at', 'id', 'requested_at', 'size_bytes', 'status']);
  t.match(accepted.body, { status: 'pending', completed_at: null, expires_at: null, download_url: null, size_bytes: null, error: null });
  t.equal(accepted.body.requested_at, clock.now().toISOString(), 'requested at the clock\'s time');
  const [job] = await cp.app.jobs.list({ type: 'accounts.data-export', state: 'queued' });
  t.same(job?.payload, { export_id: accepted.body.id }, 'the job was enqueued with the export');

  const pending = await readExport(me.accessToken);
  t.equal(pending.status, 200);
  t.match(pending.body.data, { id: accepted.body.id, status: 'pending', download_url: null });

  t.equal((await cp.app.jobs.runDue()).succeeded, 1);
  const ready = await readExport(me.accessToken);
  const data = ready.body.data;
  t.equal(data.status, 'ready');
  t.equal(data.completed_at, clock.now().toISOString());
  t.equal(data.expires_at, new Date(clock.now().getTime() + DAY).toISOString(), 'the link lasts 24 hours');
  t.match(data.download_url, new RegExp(`^${cp.config.publicUrl}/v1/data-exports/${data.id}/download\\?expires=\\d+&signature=[A-Za-z0-9_-]{43}$`));
  t.ok(data.size_bytes > 100);

  const file = await download(data.download_url);
  t.equal(file.status, 200, file.text.slice(0, 200));
  t.equal(file.headers.get('content-type'), 'application/json');
  t.match(file.headers.get('content-disposition'), /^attachment; filename="personal-data-\d{4}-\d{2}-\d{2}\.json"$/);
  t.equal(Number(file.headers.get('content-length')), data.size_bytes);
  t.equal(file.headers.get('cache-control'), 'no-store');
  t.equal(JSON.parse(file.text).export_id, data.id);

  const [row] = await exportRows(me.id);
  const stat = await fs.stat(path.join(exportDir(cp.config.dataDir), row!.file_name!));
  t.equal(stat.mode & 0o777, 0o600, 'the archive is readable by the service only');

  const mails = await messagesTo(cp, me.email);
  t.equal(mails.length, 1);
  t.match(mails[0]!.subject, /data export is ready$/);
  t.ok(mails[0]!.links.includes(data.download_url), 'the e-mail carries the same link');
  const [notification] = await query<{ type: string; category: string; expires_at: Date }>(cp, 'select type, category, expires_at from notification where user_id = ?', [me.id]);
  t.match(notification, { type: 'data_export_ready', category: 'account_security' });
  t.same(new Date(notification!.expires_at).toISOString(), data.expires_at, 'the in-app notice goes with the link');
});

t.test('the export archive holds everything stored about the user, and no secret', async (t) => {
  const me = await createLoggedInUser(cp, { display_name: 'Grace Archive', country_code: 'FR' });
  await cp.request('PATCH', '/v1/users/me', { headers: bearer(me.accessToken), json: { phone: '+33612345678', timezone: 'Europe/Paris' } });
  const card = await cp.request('POST', '/v1/payment-methods', { headers: bearer(me.accessToken), json: { payment_method_token: 'tok_visa', billing_name: 'Grace Archive' } });
  t.equal(card.status, 201);
  const planId = crypto.randomUUID();
  await query(cp, `insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
    max_quality, has_downloads, has_ads, is_active, created_at, updated_at) values (?, 'Premium', 'svod', 1599, 'EUR', 'monthly', 4, 2, 5, 'UHD_4K', true, false, true, now(), now())`, [planId]);
  await query(cp, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams,
    max_devices, current_period_start, current_period_end, payment_method_id, created_at, updated_at)
    values (gen_random_uuid(), ?, ?, 'svod', 'active', 1599, 'EUR', 'monthly', 4, 2, 5, now(), now() + interval '1 month', ?, now(), now())`, [me.id, planId, card.body.data.id]);
  const profile = await cp.request('POST', '/v1/users/me/profiles', { headers: bearer(me.accessToken), json: { name: 'Kids room', is_kids: true, pin: '4321' } });
  t.equal(profile.status, 201, profile.text);
  await query(cp, `insert into profile_watchlist_item (id, profile_id, content_id, created_at) values (gen_random_uuid(), ?, 'title-42', now())`, [profile.body.data.id]);
  const mfa = await enableMfa(cp, me);
  // An administrator's action about the user is in the audit trail.
  const second = await cp.request('POST', '/v1/payment-methods', { headers: bearer(me.accessToken), json: { payment_method_token: 'tok_mastercard' } });
  const made = await cp.request('POST', `/v1/payment-methods/${second.body.data.id}/default`, { headers: bearer(admin.accessToken) });
  t.equal(made.status, 200);

  const ready = await readyExport(t, me);
  const file = await download(ready.download_url);
  t.equal(file.status, 200);
  const archive = JSON.parse(file.text);
  t.match(archive, { format: 'streaming-platform.personal-data-export', format_version: 1, export_id: ready.id, user_id: me.id });
  t.same(Object.keys(archive.sections), ['account', 'notifications', 'auth', 'billing', 'audit'], 'one section per holder of personal data');

  const { account, auth, billing, notifications, audit } = archive.sections;
  t.match(account.user, {
    id: me.id, email: me.email, display_name: 'Grace Archive', phone: '+33612345678', country_code: 'FR', timezone: 'Europe/Paris',
    status: 'active', mfa_enabled: true, suspended_reason: null,
  });
  t.notOk('roles' in account.user);
  t.same(account.profiles.map((p: { name: string }) => p.name), ['Grace Archive', 'Kids room'], 'the primary profile first');
  t.match(account.profiles[1], { is_kids: true, pin_protected: true, watchlist: [{ content_id: 'title-42' }], progress: [] });
  t.match(account.data_exports, [{ id: ready.id, status: 'processing' }], 'the export itself, as it was while being prepared');
  t.same(account.deletion_requests, []);
  t.equal(account.avatar, null);

  t.same(auth.roles.map((r: { role: string }) => r.role), ['subscriber']);
  t.equal(auth.sessions.length, 1, 'the login');
  t.match(auth.sessions[0], { device_type: String, ip_address_hint: '127.0.0.x' });
  t.match(auth.recovery_codes, { total: 10, unused: 10 });

  // It followed the default the administrator made of the second card (issue 20, item 3).
  t.match(billing.subscriptions, [{ plan_name: 'Premium', status: 'active', price_minor: 1599, currency: 'EUR', payment_method_id: second.body.data.id }]);
  t.same(billing.payment_methods.length, 2);
  t.same(Object.keys(billing.payment_methods[0]).sort(), ['billing_country', 'billing_name', 'brand', 'created_at', 'exp_month', 'exp_year', 'id', 'is_default', 'is_expired', 'last4', 'type', 'updated_at', 'wallet_email']);
  t.match(billing.payment_methods, [{ brand: 'visa', last4: '4242', billing_name: 'Grace Archive', is_default: false }, { brand: 'mastercard', last4: '4444', is_default: true }]);

  t.same(notifications.map((n: { type: string }) => n.type), ['mfa_enabled']);
  const actions = audit.map((a: { action: string }) => a.action);
  t.ok(actions.includes('payment_method.made_default'), `audit entries about the user's resources (${actions.join(', ')})`);
  const byAdmin = audit.find((a: { action: string }) => a.action === 'payment_method.made_default');
  t.equal(byAdmin.actor, 'user (admin)', 'staff are named by role, not by who they are');
  t.equal(byAdmin.ip_address, null, 'not the administrator\'s address');
  t.notOk(file.text.includes(admin.id), 'other people\'s ids are not in the archive');

  // No secret of any kind: hashes, TOTP secrets, the gateway's reference.
  const [secrets] = await query<{ password_hash: string; totp_secret_encrypted: string }>(cp, 'select password_hash, totp_secret_encrypted from app_user where id = ?', [me.id]);
  const gatewayIds = await query<{ gateway_payment_method_id: string }>(cp, 'select gateway_payment_method_id from billing_payment_method where user_id = ?', [me.id]);
  const [pin] = await query<{ pin_hash: string }>(cp, 'select pin_hash from profile where id = ?', [profile.body.data.id]);
  const hashes = await query<{ h: string }>(cp, `select token_hash as h from auth_refresh_token rt join auth_session s on s.id = rt.session_id where s.user_id = ?
    union all select code_hash from auth_recovery_code where user_id = ?`, [me.id, me.id]);
  for (const secret of [secrets!.password_hash, secrets!.totp_secret_encrypted, ...gatewayIds.map((g) => g.gateway_payment_method_id), pin!.pin_hash, mfa.secret, ...hashes.map((h) => h.h)]) {
    t.notOk(file.text.includes(secret), `the archive does not hold ${secret.slice(0, 12)}…`);
  }
  t.notOk(/argon2|pin_hash|token_hash|code_hash|gateway_payment_method_id|totp_secret/.test(file.text), 'no secret field at all');
});

t.test('the download link fails after 24 hours of clock time and when any one character changes; the same 403 each time', async (t) => {
  const me = await createLoggedInUser(cp);
  const ready = await readyExport(t, me);
  const url = new URL(ready.download_url);
  t.equal((await download(ready.download_url)).status, 200);

  const refusals: string[] = [];
  const tamper = (value: string, at: number) => value.slice(0, at) + (value[at] === 'A' ? 'B' : 'A') + value.slice(at + 1);
  const signature = url.searchParams.get('signature')!;
  const expires = url.searchParams.get('expires')!;
  for (const at of [0, 20, signature.length - 1]) {
    const u = new URL(url);
    u.searchParams.set('signature', tamper(signature, at));
    refusals.push(u.toString());
  }
  for (const next of [String(Number(expires) + 1), String(Number(expires) + 86_400), String(Number(expires) - 1)]) {
    const u = new URL(url);
    u.searchParams.set('expires', next);
    refusals.push(u.toString());
  }
  const id = ready.id;
  refusals.push(ready.download_url.replace(id, tamper(id, 0)));
  refusals.push(ready.download_url.replace(id, crypto.randomUUID()));
  for (const link of refusals) {
    t.not(link, ready.download_url);
    const res = await download(link);
    t.equal(res.status, 403, `refused: ${link.slice(-60)}`);
    t.same([res.body.code, res.body.message], ['FORBIDDEN', 'This download link is invalid or has expired']);
  }

  clock.advance(DAY - SECOND);
  t.equal((await download(ready.download_url)).status, 200, 'still valid a second before 24 hours');
  clock.advance(SECOND);
  const expired = await download(ready.download_url);
  t.equal(expired.status, 403, 'refused once 24 hours have passed');
  t.same([expired.body.code, expired.body.message], ['FORBIDDEN', 'This download link is invalid or has expired'], 'the same answer as a changed link');
  const later = await readExport((await fresh(me)).accessToken);
  t.match(later.body.data, { status: 'ready', download_url: null }, 'GET shows no link once expired');
});

t.test('the housekeeping job deletes expired archives; the link stays refused', async (t) => {
  const me = await createLoggedInUser(cp);
  const ready = await readyExport(t, me);
  const [row] = await exportRows(me.id);
  const file = path.join(exportDir(cp.config.dataDir), row!.file_name!);
  await fs.access(file);
  clock.advance(DAY + HOUR);
  await cp.app.jobs.runDue();
  await t.rejects(fs.access(file), { code: 'ENOENT' }, 'the archive is gone');
  const [after] = await exportRows(me.id);
  t.match(after, { status: 'ready', file_name: null });
  t.equal((await download(ready.download_url)).status, 403);
});

t.test('POST /v1/users/me/data-export while one is pending or processing is 409 and stores nothing; once ready, a new one may start', async (t) => {
  const me = await createLoggedInUser(cp);
  const first = await requestExport(me.accessToken);
  t.equal(first.status, 202);
  const second = await requestExport(me.accessToken);
  t.equal(second.status, 409);
  t.equal(second.body.code, 'CONFLICT');
  t.equal((await exportRows(me.id)).length, 1, 'no second export');
  t.equal((await cp.app.jobs.list({ type: 'accounts.data-export', state: 'queued' })).filter((j) => j.payload.export_id !== first.body.id).length, 0, 'no second job');
  await query(cp, `update account_data_export set status = 'processing' where id = ?`, [first.body.id]);
  t.equal((await requestExport(me.accessToken)).status, 409, 'refused while processing too');
  await query(cp, `update account_data_export set status = 'pending' where id = ?`, [first.body.id]);

  await cp.app.jobs.runDue();
  clock.advance(SECOND);
  const third = await requestExport(me.accessToken);
  t.equal(third.status, 202, 'a new export once the previous one is ready');
  t.not(third.body.id, first.body.id);
  t.equal((await readExport(me.accessToken)).body.data.id, third.body.id, 'GET follows the latest');
  await cp.app.jobs.runDue();
});

t.test('concurrent export requests of one account: exactly one is accepted', { skip: !cp.database.real && 'needs PostgreSQL (several sessions)' }, async (t) => {
  const me = await createLoggedInUser(cp);
  // Another session holds back inserts so every request has looked for an open export before any is stored.
  const holder = new pg.Client({ connectionString: cp.database.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('lock table account_data_export in share row exclusive mode');
  const racing = [1, 2, 3].map(() => requestExport(me.accessToken));
  await eventually(async () => {
    await holder.query('select pg_stat_clear_snapshot()');
    return (await holder.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows[0].n === racing.length;
  }, 'every request waiting in the database');
  await holder.query('commit');
  const statuses = (await Promise.all(racing)).map((r) => r.status).sort();
  t.same(statuses, [202, 409, 409]);
  t.equal((await exportRows(me.id)).length, 1);
  await cp.app.jobs.runDue();
});

t.test('an export whose job keeps failing ends failed with a message, and the account may ask again', async (t) => {
  const me = await createLoggedInUser(cp);
  // The archive directory cannot be made: a file stands where it should be.
  const dir = exportDir(cp.config.dataDir);
  const aside = `${dir}.aside`;
  await fs.rename(dir, aside);
  await fs.writeFile(dir, 'not a directory');
  const restore = async () => {
    if ((await fs.stat(dir)).isFile()) {
      await fs.rm(dir);
      await fs.rename(aside, dir);
    }
  };
  t.teardown(restore);
  const accepted = await requestExport(me.accessToken);
  t.equal(accepted.status, 202);
  for (let attempt = 1; attempt <= EXPORT_ATTEMPTS; attempt++) {
    await cp.app.jobs.runDue();
    const [row] = await exportRows(me.id);
    t.equal(row!.status, attempt < EXPORT_ATTEMPTS ? 'processing' : 'failed', `after attempt ${attempt}`);
    clock.advance(15 * MINUTE); // past the retry's backoff
  }
  const failed = await readExport((await fresh(me)).accessToken);
  t.match(failed.body.data, { id: accepted.body.id, status: 'failed', download_url: null, error: 'The export could not be prepared. Please request a new one.' });
  t.equal((await messagesTo(cp, me.email)).length, 0, 'no e-mail for a failed export');
  await restore();
  const again = await requestExport((await fresh(me)).accessToken);
  t.equal(again.status, 202, 'a failed export does not block a new one');
  await cp.app.jobs.runDue();
});

t.test('an export whose job was lost is failed by the housekeeping job after six hours', async (t) => {
  const me = await createLoggedInUser(cp);
  const accepted = await requestExport(me.accessToken);
  await query(cp, `delete from job where type = 'accounts.data-export' and payload->>'export_id' = ?`, [accepted.body.id]);
  clock.advance(6 * HOUR + MINUTE);
  await cp.app.jobs.runDue();
  const [row] = await exportRows(me.id);
  t.equal(row!.status, 'failed');
  t.equal((await requestExport((await fresh(me)).accessToken)).status, 202);
  await cp.app.jobs.runDue();
});

t.test('data-export operations refuse malformed input with 400 and store nothing', async (t) => {
  const me = await createLoggedInUser(cp);
  for (const res of [
    await requestExport(me.accessToken, { json: { format: 'zip' } }),
    await requestExport(me.accessToken, { query: '?format=zip' }),
    await readExport(me.accessToken, '?all=true'),
    await cp.request('GET', '/v1/data-exports/x/download?expires=1&signature=a&extra=1'),
    await cp.request('GET', '/v1/data-exports/x/download?expires=1'),
    await cp.request('GET', `/v1/data-exports/x/download?expires=${'9'.repeat(30)}&signature=a`),
  ]) {
    t.equal(res.status, 400, res.text);
    t.equal(res.body.code, 'VALIDATION_ERROR');
  }
  t.equal(await countRows(cp, 'account_data_export', 'user_id = ?', [me.id]), 0);
  t.equal((await cp.request('POST', '/v1/users/me/data-export')).status, 401, 'a login is needed');
  t.equal((await readExport('not-a-token')).status, 401);
});

t.test('each user sees only their own export', async (t) => {
  const owner = await createLoggedInUser(cp);
  const other = await createLoggedInUser(cp);
  const ready = await readyExport(t, owner);
  t.equal((await readExport(other.accessToken)).status, 404, 'another user has none');
  const mine = await readExport(owner.accessToken);
  t.equal(mine.body.data.id, ready.id);
});

t.test('the OpenAPI document shows the data-export operations', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/users/me/data-export'].post.responses['202']);
  t.ok(doc.paths['/v1/users/me/data-export'].get.responses['200']);
  t.ok(doc.paths['/v1/users/me/data-export'].post.responses['409'], 'the refusal is documented');
  const dl = doc.paths['/v1/data-exports/{export_id}/download'].get;
  t.ok(dl.responses['200'].content['application/json']);
  t.ok(dl.responses['403']);
});
