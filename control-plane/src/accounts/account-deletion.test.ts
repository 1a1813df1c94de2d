// Account deletion through the real server on PostgreSQL and Redis (document
// 1 §3, §4.1, part 8; DESIGN.md §5): both forms, the 30-day grace period with
// subscriptions ended at once, what the owner may do meanwhile, canceling,
// and the erasure job at the end of the grace period, after which no table
// of the database holds the person's e-mail, name, phone or address.
import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import t, { type Test } from 'tap';
import { z } from 'zod';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, enableMfa, login, messagesTo, OTHER_PASSWORD, PASSWORD, query, register, RELAXED_LIMITS,
  uniqueEmail, verifyEmail, type TestAccount,
} from '../../../test/support/auth.ts';
import { DAY, ManualClock, MINUTE } from '../core/clock.ts';
import { systemContext } from '../core/request-context.ts';
import { jobsFor } from '../jobs/index.ts';
import type { AppServices } from '../server.ts';
import { exportDir } from './data-export-service.ts';
import { DELETION_GRACE_MS, eraseAccount } from './deletion-service.ts';

// A job type of "another capability" whose payload and error name a person (e-mail), for the erasure to scrub.
const mailing = jobsFor<AppServices>()({
  type: 'test.mailing',
  payload: z.object({ to: z.string(), note: z.string() }),
  retry: { attempts: 2, baseDelayMs: 200 * DAY, maxDelayMs: 200 * DAY },
  async handler(_rc, payload) {
    throw new Error(`mail server refused ${payload.to}`);
  },
});

const clock = new ManualClock();
const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, TRUST_PROXY: 'true' }, clock, extraJobs: [mailing] });
let admin = await createAdmin(cp);

/** The first form, confirmed with the password (PASSWORD) unless `json` says otherwise (`json: undefined`: no body). */
const deleteMe = (token: string, options: { json?: unknown; query?: string; headers?: Record<string, string> } = {}) =>
  cp.request('DELETE', `/v1/users/me${options.query ?? ''}`, { headers: bearer(token, options.headers), json: 'json' in options ? options.json : { password: PASSWORD } });
const requestDeletion = (token: string, json: unknown) => cp.request('POST', '/v1/users/me/deletion-request', { headers: bearer(token), json });
const readDeletion = (token: string) => cp.request('GET', '/v1/users/me/deletion-request', { headers: bearer(token) });
const cancelDeletion = (token: string) => cp.request('DELETE', '/v1/users/me/deletion-request', { headers: bearer(token) });
const requestsOf = (userId: string) => query<{ id: string; status: string; reason: string | null; scheduled_deletion_at: Date; canceled_at: Date | null; completed_at: Date | null }>(
  cp, 'select * from account_deletion_request where user_id = ? order by requested_at', [userId]);
const erasureJobsOf = async (requestId: string) => (await cp.app.jobs.list({ type: 'accounts.erasure' })).filter((j) => j.payload.deletion_request_id === requestId);
const fresh = async (account: TestAccount, headers?: Record<string, string>) => ({ ...account, ...(await login(cp, account.email, account.password, {}, headers)) });

let planId: string | undefined;
/** A subscription inserted straight into the database (the subscription routes come with the billing engine). */
async function insertSubscription(userId: string, status: string, type = 'svod'): Promise<string> {
  if (!planId) {
    planId = crypto.randomUUID();
    await query(cp, `insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
      max_quality, has_downloads, has_ads, is_active, created_at, updated_at) values (?, 'Standard', 'svod', 999, 'EUR', 'monthly', 4, 2, 5, 'HD', false, false, true, now(), now())`, [planId]);
  }
  const id = crypto.randomUUID();
  await query(cp, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams,
    max_devices, current_period_start, current_period_end, next_billing_date, created_at, updated_at)
    values (?, ?, ?, ?, ?, 999, 'EUR', 'monthly', 4, 2, 5, now(), now() + interval '1 month', now() + interval '1 month', now(), now())`, [id, userId, planId, type, status]);
  return id;
}
const subscriptionsOf = (userId: string) => query<{ id: string; type: string; status: string; canceled_at: Date | null; auto_renew: boolean; next_billing_date: Date | null }>(
  cp, 'select * from billing_subscription where user_id = ? order by type', [userId]);

t.test('DELETE /v1/users/me (first form) accepts: 202 bare pending request 30 days out, subscriptions ended at once, job scheduled, audit, notice', async (t) => {
  const me = await createLoggedInUser(cp);
  const svod = await insertSubscription(me.id, 'active');
  const addon = await insertSubscription(me.id, 'trialing', 'addon');
  const ended = await insertSubscription(me.id, 'expired', 'live');
  const res = await deleteMe(me.accessToken);
  t.equal(res.status, 202, res.text);
  t.same(Object.keys(res.body).sort(), ['canceled_at', 'completed_at', 'id', 'reason', 'requested_at', 'scheduled_deletion_at', 'status']);
  const now = clock.now();
  t.match(res.body, { status: 'pending', reason: null, canceled_at: null, completed_at: null, requested_at: now.toISOString() });
  t.equal(res.body.scheduled_deletion_at, new Date(now.getTime() + 30 * DAY).toISOString(), '30 days of grace');

  const subs = await subscriptionsOf(me.id);
  t.match(subs.find((s) => s.id === svod), { status: 'canceled', auto_renew: false, next_billing_date: null });
  t.same(new Date(subs.find((s) => s.id === svod)!.canceled_at!), now, 'canceled now');
  t.match(subs.find((s) => s.id === addon), { status: 'canceled' });
  t.match(subs.find((s) => s.id === ended), { status: 'expired', canceled_at: null }, 'an ended subscription is left as it was');
  t.equal(await countRows(cp, 'audit_log', `action = 'subscription.canceled' and metadata->>'user_id' = ?`, [me.id]), 2, 'each cancellation audit-logged');

  const [job] = await erasureJobsOf(res.body.id);
  t.equal(job?.state, 'queued');
  t.same(job?.run_at, new Date(res.body.scheduled_deletion_at), 'the erasure is scheduled for the end of the grace period');
  t.equal(job?.unique_key, `user:${me.id}`);
  const [audit] = await query<{ actor_id: string; metadata: Record<string, unknown> }>(cp, `select actor_id, metadata from audit_log where action = 'account.deletion_requested' and resource_id = ?`, [me.id]);
  t.equal(audit?.actor_id, me.id);
  t.match(audit?.metadata, { deletion_request_id: res.body.id, form: 'first', subscriptions_canceled: 2 });
  const mails = await messagesTo(cp, me.email);
  t.match(mails.map((m) => m.subject), ['Your account is scheduled for deletion']);
  t.match(mails[0]!.text, /cancel the deletion/);

  const again = await deleteMe(me.accessToken);
  t.equal(again.status, 202, 'asking again is harmless');
  t.same(again.body, res.body, 'the pending request, unchanged');
  t.equal((await requestsOf(me.id)).length, 1);
  t.equal((await erasureJobsOf(res.body.id)).length, 1);
  t.equal((await messagesTo(cp, me.email)).length, 1, 'no second notice');
});

t.test('POST /v1/users/me/deletion-request (second form) checks the password: wrong → 400 on password and nothing changes', async (t) => {
  const me = await createLoggedInUser(cp);
  const svod = await insertSubscription(me.id, 'active');
  const wrong = await requestDeletion(me.accessToken, { password: OTHER_PASSWORD, reason: 'Too expensive' });
  t.equal(wrong.status, 400);
  t.equal(wrong.body.code, 'VALIDATION_ERROR');
  t.same(wrong.body.errors.map((e: { field: string }) => e.field), ['password']);
  t.equal((await requestsOf(me.id)).length, 0, 'no request stored');
  t.match((await subscriptionsOf(me.id))[0], { id: svod, status: 'active' }, 'the subscription goes on');
  t.equal(await countRows(cp, 'job', `type = 'accounts.erasure' and unique_key = ?`, [`user:${me.id}`]), 0, 'no erasure scheduled');
  t.equal(await countRows(cp, 'audit_log', `action = 'account.deletion_requested' and resource_id = ?`, [me.id]), 0);
  t.equal((await cp.request('PATCH', '/v1/users/me', { headers: bearer(me.accessToken), json: { locale: 'fr' } })).status, 200, 'full access remains');

  const ok = await requestDeletion(me.accessToken, { password: PASSWORD, reason: '  Moving abroad ' });
  t.equal(ok.status, 202, ok.text);
  t.match(ok.body, { status: 'pending', reason: 'Moving abroad' });
  t.match((await subscriptionsOf(me.id))[0], { status: 'canceled' });
  const [row] = await requestsOf(me.id);
  t.equal(row?.reason, 'Moving abroad');
  const [audit] = await query<{ metadata: Record<string, unknown> }>(cp, `select metadata from audit_log where action = 'account.deletion_requested' and resource_id = ?`, [me.id]);
  t.match(audit?.metadata, { form: 'second', subscriptions_canceled: 1 });
  t.notOk(JSON.stringify(audit?.metadata).includes('Moving abroad'), 'the reason stays on the request, out of the audit trail');

  const wrongAgain = await requestDeletion(me.accessToken, { password: OTHER_PASSWORD });
  t.equal(wrongAgain.status, 400, 'the password is checked even while a request is pending');
  const again = await requestDeletion(me.accessToken, { password: PASSWORD, reason: 'Another reason' });
  t.equal(again.status, 202);
  t.same(again.body, ok.body, 'the pending request, unchanged');
});

t.test('deletion requests refuse malformed input with 400 and store nothing', async (t) => {
  const me = await createLoggedInUser(cp);
  const bodies: unknown[] = [
    {},
    { reason: 'no password' },
    { password: '' },
    { password: PASSWORD, reason: 'x'.repeat(501) },
    { password: PASSWORD, reason: 'two\nlines' },
    { password: PASSWORD, reason: 42 },
    { password: PASSWORD, unknown: true },
    { password: 12345678901 },
  ];
  for (const body of bodies) {
    const res = await requestDeletion(me.accessToken, body);
    t.equal(res.status, 400, JSON.stringify(body));
    t.equal(res.body.code, 'VALIDATION_ERROR');
  }
  const withBody = await deleteMe(me.accessToken, { json: { password: PASSWORD, reason: 'the first form takes no reason' } });
  t.equal(withBody.status, 400, 'the first form\'s body takes the password only');
  t.equal(withBody.body.errors[0].field, 'reason');
  t.equal((await deleteMe(me.accessToken, { query: '?force=true' })).status, 400, 'nor a query');
  t.equal((await cp.request('DELETE', '/v1/users/me/deletion-request?x=1', { headers: bearer(me.accessToken) })).status, 400);
  t.equal((await requestsOf(me.id)).length, 0, 'nothing stored');
  t.equal(await countRows(cp, 'job', `type = 'accounts.erasure' and unique_key = ?`, [`user:${me.id}`]), 0);
  t.equal((await cp.request('DELETE', '/v1/users/me')).status, 401, 'a login is needed');
  t.equal((await readDeletion(me.accessToken)).status, 404, 'GET: no request yet');
  t.equal((await cancelDeletion(me.accessToken)).status, 404, 'nothing to cancel');
});

t.test('regression: a stolen access token alone deleted the account (DELETE /v1/users/me took no password), ending paid subscriptions without refund', async (t) => {
  const me = await createLoggedInUser(cp);
  const svod = await insertSubscription(me.id, 'active');
  const untouched = async (what: string) => {
    t.equal((await requestsOf(me.id)).length, 0, `${what}: no request`);
    t.match((await subscriptionsOf(me.id)).find((s) => s.id === svod), { status: 'active' }, `${what}: the subscription runs`);
  };
  const bare = await deleteMe(me.accessToken, { json: undefined });
  t.equal(bare.status, 403, 'the access token alone is not enough');
  t.equal(bare.body.code, 'STEP_UP_REQUIRED');
  t.match(bare.body.message, /password.*step-up token/);
  await untouched('no proof');
  const wrong = await deleteMe(me.accessToken, { json: { password: OTHER_PASSWORD } });
  t.equal(wrong.status, 400);
  t.equal(wrong.body.errors[0].field, 'password');
  await untouched('a wrong password');
  const forged = await deleteMe(me.accessToken, { json: undefined, headers: { 'x-step-up-token': 'not.a.token' } });
  t.equal(forged.status, 403);
  t.equal(forged.body.code, 'STEP_UP_REQUIRED');
  await untouched('a bad step-up token');

  const res = await deleteMe(me.accessToken, { json: { password: PASSWORD } });
  t.equal(res.status, 202, 'with the password');
  t.match((await subscriptionsOf(me.id)).find((s) => s.id === svod), { status: 'canceled' });
  const [audit] = await query<{ metadata: Record<string, unknown> }>(cp, `select metadata from audit_log where action = 'account.deletion_requested' and resource_id = ?`, [me.id]);
  t.match(audit?.metadata, { form: 'first', confirmed_by: 'password_check' });
});

t.test('DELETE /v1/users/me takes a fresh step-up token of the same session instead of the password', async (t) => {
  const me = await createLoggedInUser(cp);
  const { stepUp } = await enableMfa(cp, me);
  const second = await createLoggedInUser(cp);
  const { stepUp: strangers } = await enableMfa(cp, second);
  const foreign = await deleteMe(me.accessToken, { json: undefined, headers: { 'x-step-up-token': strangers } });
  t.equal(foreign.status, 403, 'another account\'s step-up token does not do');
  t.equal((await requestsOf(me.id)).length, 0);
  const res = await deleteMe(me.accessToken, { json: undefined, headers: { 'x-step-up-token': stepUp } });
  t.equal(res.status, 202, res.text);
  const [audit] = await query<{ metadata: Record<string, unknown> }>(cp, `select metadata from audit_log where action = 'account.deletion_requested' and resource_id = ?`, [me.id]);
  t.match(audit?.metadata, { form: 'first', confirmed_by: 'step_up' });
  t.equal((await cancelDeletion(me.accessToken)).status, 204);
});

t.test('during the grace period the owner may log in, read the account, export and cancel; the rest is 403 ACCOUNT_PENDING_DELETION', async (t) => {
  let me = await createLoggedInUser(cp);
  t.equal((await deleteMe(me.accessToken)).status, 202);
  me = await fresh(me);
  t.pass('login still works');
  const headers = bearer(me.accessToken);
  t.equal((await cp.request('GET', '/v1/users/me', { headers })).status, 200);
  const pending = await readDeletion(me.accessToken);
  t.equal(pending.status, 200);
  t.match(pending.body.data, { status: 'pending' });
  t.equal((await cp.request('GET', '/v1/me/auth/sessions', { headers })).status, 200, 'sessions may be reviewed');
  t.equal((await cp.request('POST', '/v1/users/me/data-export', { headers })).status, 202, 'the data may be exported');
  t.equal((await cp.request('GET', '/v1/users/me/data-export', { headers })).status, 200);
  for (const [method, url, json] of [
    ['PATCH', '/v1/users/me', { locale: 'de' }],
    ['GET', '/v1/users/me/profiles', undefined],
    ['GET', '/v1/payment-methods', undefined],
    ['GET', '/v1/notifications', undefined],
    ['POST', '/v1/users/me/password', { current_password: PASSWORD, new_password: OTHER_PASSWORD }],
  ] as const) {
    const res = await cp.request(method, url, { headers, json });
    t.equal(res.status, 403, `${method} ${url}`);
    t.equal(res.body.code, 'ACCOUNT_PENDING_DELETION');
  }
  t.equal((await cp.request('POST', '/v1/auth/logout', { headers })).status, 200, 'logout works');
  await cp.app.jobs.runDue();
});

t.test('DELETE /v1/users/me/deletion-request cancels: 204, access restored, erasure withdrawn, audit-logged; subscriptions stay ended', async (t) => {
  const me = await createLoggedInUser(cp);
  await insertSubscription(me.id, 'active');
  const requested = await deleteMe(me.accessToken);
  t.equal(requested.status, 202);
  t.equal((await cp.request('GET', '/v1/users/me/profiles', { headers: bearer(me.accessToken) })).status, 403);

  clock.advance(10 * DAY);
  const session = await fresh(me);
  const canceled = await cancelDeletion(session.accessToken);
  t.equal(canceled.status, 204);
  t.equal(canceled.text, '');
  const [row] = await requestsOf(me.id);
  t.equal(row?.status, 'canceled');
  t.same(new Date(row!.canceled_at!), clock.now());
  t.same(await erasureJobsOf(requested.body.id), [], 'the scheduled erasure is withdrawn');
  t.equal(await countRows(cp, 'audit_log', `action = 'account.deletion_canceled' and resource_id = ? and actor_id = ?`, [me.id, me.id]), 1, 'audit-logged');
  t.equal((await cp.request('GET', '/v1/users/me/profiles', { headers: bearer(session.accessToken) })).status, 200, 'full access again');
  t.match((await subscriptionsOf(me.id))[0], { status: 'canceled' }, 'canceled subscriptions are not revived');
  t.match((await readDeletion(session.accessToken)).body.data, { status: 'canceled' });
  t.equal((await cancelDeletion(session.accessToken)).status, 404, 'nothing left to cancel');

  // Past the first schedule, nothing happens to the account.
  clock.advance(25 * DAY);
  await cp.app.jobs.runDue();
  const [user] = await query<{ status: string; email: string }>(cp, 'select status, email from app_user where id = ?', [me.id]);
  t.same(user, { status: 'active', email: me.email });

  // A new request gets a new schedule and a job of its own.
  const later = await fresh(me);
  const second = await deleteMe(later.accessToken);
  t.equal(second.status, 202);
  t.not(second.body.id, requested.body.id);
  const jobs = await erasureJobsOf(second.body.id);
  t.equal(jobs.length, 1);
  t.same(jobs[0]!.run_at, new Date(clock.now().getTime() + DELETION_GRACE_MS));
  t.equal((await cancelDeletion(later.accessToken)).status, 204);
});

/** Rows anywhere in the database (every table, every column as text) that contain one of the needles. */
async function findEverywhere(needles: string[]): Promise<string[]> {
  const tables = await query<{ table_name: string }>(cp, `select table_name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE' order by table_name`);
  const hits: string[] = [];
  for (const { table_name } of tables) {
    for (const needle of needles) {
      const rows = await query<{ r: string }>(cp, `select row_to_json(t)::text as r from "${table_name}" t where strpos(lower(row_to_json(t)::text), lower(?)) > 0`, [needle]);
      for (const row of rows) hits.push(`${table_name} holds ${needle}: ${row.r.slice(0, 300)}`);
    }
  }
  return hits;
}

async function png(): Promise<Buffer> {
  return sharp({ create: { width: 64, height: 64, channels: 3, background: '#3366aa' } }).png().toBuffer();
}

t.test('the erasure job at the end of the grace period leaves no trace of the person in any table, keeps the accounting records, and frees the e-mail', async (t) => {
  const tag = crypto.randomUUID().slice(0, 8);
  const name = `Zebulon Quillfeather ${tag}`;
  const phone = `+4915${Math.floor(1e8 + Math.random() * 9e8)}`;
  const ip = '203.0.113.77';
  const fromIp = { 'x-forwarded-for': ip };

  // An account with everything: registered, verified and logged in from one address, a display name, a phone,
  // an avatar, profiles, a payment method and a subscription, MFA, notifications, an export, audit entries.
  const email = uniqueEmail('erase');
  await register(cp, { email, headers: fromIp, body: { display_name: name, country_code: 'DE' } });
  await verifyEmail(cp, email);
  let me: TestAccount = { id: '', email, password: PASSWORD, ...(await login(cp, email, PASSWORD, {}, fromIp)) };
  const meRes = await cp.request('PATCH', '/v1/users/me', { headers: bearer(me.accessToken, fromIp), json: { phone, timezone: 'Europe/Berlin', preferred_language: 'de' } });
  t.equal(meRes.status, 200);
  me.id = meRes.body.data.id;
  const form = new FormData();
  form.append('file', new Blob([new Uint8Array(await png())], { type: 'image/png' }), 'me.png');
  const avatar = await cp.request('PUT', '/v1/users/me/avatar', { headers: bearer(me.accessToken, fromIp), body: form });
  t.equal(avatar.status, 200, avatar.text);
  const avatarFile = path.join(cp.config.dataDir, 'avatars', avatar.body.data.avatar_url.split('/').pop());
  await fs.access(avatarFile);
  const card = await cp.request('POST', '/v1/payment-methods', { headers: bearer(me.accessToken, fromIp), json: { payment_method_token: 'tok_visa', billing_name: name } });
  t.equal(card.status, 201);
  const subscription = await insertSubscription(me.id, 'active');
  t.equal((await cp.request('POST', '/v1/users/me/profiles', { headers: bearer(me.accessToken, fromIp), json: { name: `Little ${tag}`, pin: '2468' } })).status, 201);
  const mfa = await enableMfa(cp, { accessToken: me.accessToken });
  const changed = await cp.request('POST', '/v1/users/me/password', { headers: bearer(me.accessToken, fromIp), json: { current_password: PASSWORD, new_password: OTHER_PASSWORD } });
  t.equal(changed.status, 200);
  me = { ...me, password: OTHER_PASSWORD, accessToken: changed.body.data.access_token };
  const exported = await cp.request('POST', '/v1/users/me/data-export', { headers: bearer(me.accessToken, fromIp) });
  t.equal(exported.status, 202);
  await cp.app.jobs.runDue();
  const [exportRow] = await query<{ file_name: string }>(cp, 'select file_name from account_data_export where user_id = ?', [me.id]);
  const exportFile = path.join(exportDir(cp.config.dataDir), exportRow!.file_name);
  await fs.access(exportFile);
  // Administrators act on the account: their reasons name the person.
  admin = await fresh(admin);
  t.equal((await cp.request('POST', `/v1/admin/users/${me.id}/suspend`, { headers: bearer(admin.accessToken), json: { reason: `Chargeback check for ${name} <${email}>`, notify_user: false } })).status, 200);
  t.equal((await cp.request('POST', `/v1/admin/users/${me.id}/reinstate`, { headers: bearer(admin.accessToken), json: { note: `Spoke to ${name} on ${phone}` } })).status, 200);
  t.equal((await cp.request('POST', `/v1/payment-methods/${card.body.data.id}/default`, { headers: bearer(admin.accessToken) })).status, 200);
  // Another capability's jobs name the person: one waiting, one waiting to retry with an error naming them.
  const queuedJob = await cp.app.jobs.enqueue(mailing, { to: email, note: `Dear ${name}` }, { runAt: new Date(clock.now().getTime() + 365 * DAY) });
  const failingJob = await cp.app.jobs.enqueue(mailing, { to: email, note: `call ${phone}` });
  await cp.app.jobs.runDue();
  t.match((await cp.app.jobs.get(failingJob.id))?.last_error, email);

  // The person is all over the database now (the scan finds what it looks for).
  const needles = [email, name, phone, ip, '203.0.113.x'];
  const before = await findEverywhere(needles);
  for (const table of ['app_user', 'profile', 'billing_payment_method', 'audit_log', 'auth_session', 'job', 'account_deletion_request']) {
    if (table === 'account_deletion_request') continue; // not yet
    t.ok(before.some((hit) => hit.startsWith(`${table} holds`)), `before: ${table} holds the person's data`);
  }
  const auditBefore = await countRows(cp, 'audit_log', `actor_id = ? or resource_id = ? or metadata->>'user_id' = ?`, [me.id, me.id, me.id]);

  // Suspension ended the sessions: log in again, with MFA.
  me = { ...me, ...(await login(cp, email, OTHER_PASSWORD, { recovery_code: mfa.codes[0] }, fromIp)) };
  const requested = await requestDeletion(me.accessToken, { password: OTHER_PASSWORD, reason: `Bye from ${name}` });
  t.equal(requested.status, 202, requested.text);
  t.ok((await findEverywhere([name])).some((hit) => hit.startsWith('account_deletion_request holds')), 'the reason names the person');
  const oldToken = me.accessToken;

  // Not a minute early.
  clock.advance(DELETION_GRACE_MS - MINUTE);
  await cp.app.jobs.runDue();
  t.equal((await query<{ status: string }>(cp, 'select status from app_user where id = ?', [me.id]))[0]!.status, 'active', 'still there a minute before');
  clock.advance(2 * MINUTE);
  await cp.app.jobs.runDue();

  const after = await findEverywhere(needles);
  t.same(after, [], 'no table holds the e-mail, name, phone or address any more');

  const [user] = await query<Record<string, unknown>>(cp, 'select * from app_user where id = ?', [me.id]);
  t.match(user, {
    status: 'deleted', email: `deleted+${me.id}@invalid`, email_verified: false, password_hash: null, display_name: null, phone: null,
    locale: null, timezone: null, country_code: null, preferred_language: null, mfa_enabled: false, totp_secret_encrypted: null,
    totp_pending_secret_encrypted: null, recovery_codes_generated_at: null, avatar_url: null, suspended_reason: null, last_login_at: null,
  });
  for (const table of ['profile', 'auth_session', 'auth_one_time_token', 'auth_recovery_code', 'user_role', 'billing_payment_method', 'notification', 'account_data_export']) {
    t.equal(await countRows(cp, table, 'user_id = ?', [me.id]), 0, `${table}: nothing left`);
  }
  await t.rejects(fs.access(avatarFile), { code: 'ENOENT' }, 'the avatar file is gone');
  await t.rejects(fs.access(exportFile), { code: 'ENOENT' }, 'the export archive is gone');
  t.match(await query(cp, 'select status from billing_subscription where id = ?', [subscription]), [{ status: 'canceled' }], 'the subscription is kept for accounting');
  t.match(await requestsOf(me.id), [{ status: 'completed', reason: null }]);
  t.equal(await countRows(cp, 'audit_log', `(actor_id = ? or resource_id = ? or metadata->>'user_id' = ?) and (ip_address is not null or user_agent is not null)`, [me.id, me.id, me.id]), 0, 'no address in the trail');
  t.ok(await countRows(cp, 'audit_log', `actor_id = ? or resource_id = ? or metadata->>'user_id' = ?`, [me.id, me.id, me.id]) >= auditBefore, 'the audit trail is kept whole');
  t.equal(await countRows(cp, 'audit_log', `action = 'account.erased' and resource_id = ?`, [me.id]), 1);
  t.match((await cp.app.jobs.get(queuedJob.id))?.payload, { to: '[erased]', note: '[erased]' }, 'a waiting job no longer names the person (each value naming them is replaced whole)');
  t.equal((await cp.app.jobs.get(queuedJob.id))?.state, 'queued');
  t.match((await cp.app.jobs.get(failingJob.id))?.last_error, /mail server refused \[erased\]/);

  // The erased account is gone for good; its address is free again.
  const refusedLogin = await cp.request('POST', '/v1/auth/login', { json: { email, password: OTHER_PASSWORD } });
  t.equal(refusedLogin.status, 401);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(oldToken) })).status, 401, 'an access token of the erased account is refused');
  t.equal(await eraseAccount(cp.app, systemContext(cp.app), requested.body.id), 'skipped', 'a second run changes nothing');
  const again = await register(cp, { email });
  await verifyEmail(cp, email);
  t.not(again.id, me.id, 'a new account with the same address');
  t.equal((await login(cp, email, PASSWORD)).res.status, 200);
});

t.test('the erasure runs once: two runs at the same time erase once', async (t) => {
  const me = await createLoggedInUser(cp);
  const requested = await deleteMe(me.accessToken);
  clock.advance(DELETION_GRACE_MS);
  const results = await Promise.all([1, 2].map(() => eraseAccount(cp.app, systemContext(cp.app), requested.body.id)));
  t.same(results.sort(), ['erased', 'skipped']);
  t.equal(await countRows(cp, 'audit_log', `action = 'account.erased' and resource_id = ?`, [me.id]), 1);
  await cp.app.jobs.runDue();
  t.equal(await countRows(cp, 'audit_log', `action = 'account.erased' and resource_id = ?`, [me.id]), 1, 'the scheduled job finds nothing left to do');
});

t.test('a lost erasure job is enqueued again by the housekeeping job once the grace has ended', async (t) => {
  const me = await createLoggedInUser(cp);
  const requested = await deleteMe(me.accessToken);
  await query(cp, `delete from job where type = 'accounts.erasure' and unique_key = ?`, [`user:${me.id}`]);
  clock.advance(DELETION_GRACE_MS + 2 * 3600_000);
  await cp.app.jobs.runDue();
  t.match(await requestsOf(me.id), [{ id: requested.body.id, status: 'completed' }]);
  t.match(await query(cp, 'select status from app_user where id = ?', [me.id]), [{ status: 'deleted' }]);
});

t.test('an unverified account may ask for its deletion', async (t) => {
  const { email } = await register(cp);
  const session = await login(cp, email);
  const res = await deleteMe(session.accessToken);
  t.equal(res.status, 202);
  t.equal((await cancelDeletion(session.accessToken)).status, 204);
});

t.test('the OpenAPI document shows the deletion operations and the pending-deletion refusal', async (t: Test) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/users/me'].delete.responses['202']);
  t.ok(doc.paths['/v1/users/me/deletion-request'].post.responses['202']);
  t.ok(doc.paths['/v1/users/me/deletion-request'].get.responses['200']);
  t.ok(doc.paths['/v1/users/me/deletion-request'].delete.responses['204']);
  t.match(JSON.stringify(doc.paths['/v1/users/me'].patch.responses['403']), /ACCOUNT_PENDING_DELETION/, 'other operations list the refusal');
  t.notMatch(JSON.stringify(doc.paths['/v1/users/me/deletion-request'].delete.responses['403'] ?? {}), /ACCOUNT_PENDING_DELETION/);
});
