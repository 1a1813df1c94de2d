// CDN admin users through the real server on PostgreSQL and Redis (document 3
// §2, §3, §4.11; DESIGN.md §5): invite (e-mail → link → password → login),
// grant to an existing account, list/read, update with If-Match, deactivate
// (sessions end, login refused) and reactivate; the superadmin rules, the
// self-protection rules, role checks and bad input that changes nothing.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  countRows, createAdmin, createLoggedInUser, createSuperadmin, createUserDirect, latestMessage, login, messagesTo, OTHER_PASSWORD, query,
  RELAXED_LIMITS, sender, tokenFromLatest, uniqueEmail, type Caller, type TestAccount,
} from '../../../test/support/auth.ts';
import { systemContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { deactivateAdminUser } from './admin-user-service.ts';

const INVITE_SUBJECT = /invited to the .* CDN console/;

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const superadmin = await createSuperadmin(cp, { display_name: 'Root Admin' });
const admin = await createAdmin(cp, { display_name: 'Ada Admin' });
const viewer = await createLoggedInUser(cp, { roles: ['viewer', 'subscriber'] });
const operator = await createLoggedInUser(cp, { roles: ['operator', 'subscriber'] });

const send = sender(cp);

async function invite(json: Record<string, unknown> = {}, who: Caller = admin): Promise<Record<string, any> & { id: string; email: string }> {
  const res = await send(who, 'POST', '/v1/cdn/admin/users', { email: uniqueEmail('cdn'), role: 'operator', ...json });
  if (res.status !== 201) throw new Error(`invite: ${res.status} ${res.text}`);
  return res.body;
}

/** Invite → link from the outbox → accept with OTHER_PASSWORD → login. */
async function inviteAndAccept(json: Record<string, unknown> = {}): Promise<TestAccount & { record: Record<string, any> }> {
  const record = await invite(json);
  const token = await tokenFromLatest(cp, record.email, INVITE_SUBJECT);
  const accepted = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD });
  if (accepted.status !== 200) throw new Error(`accept: ${accepted.status} ${accepted.text}`);
  return { id: record.id, email: record.email, password: OTHER_PASSWORD, record, ...(await login(cp, record.email, OTHER_PASSWORD)) };
}

const auditOf = (id: string) => query<{ action: string; actor_id: string; actor_type: string; resource_type: string; metadata: Record<string, any> }>(
  cp, 'select action, actor_id, actor_type, resource_type, metadata from audit_log where resource_id = ? order by created_at', [id]);
const rowCounts = async () => ({
  users: await countRows(cp, 'app_user'), roles: await countRows(cp, 'user_role'), audit: await countRows(cp, 'audit_log'), tokens: await countRows(cp, 'auth_one_time_token'),
});

t.test('the last active superadmin cannot be deactivated (409), whoever asks', async (t) => {
  // The only superadmin of this database is `superadmin`; a caller holding the role without an active account asks.
  const rc = systemContext(cp.app, { actor: { type: 'user', id: crypto.randomUUID(), roles: ['superadmin'] } });
  const error = await deactivateAdminUser(cp.app, rc, superadmin.id).then(() => null, (e: unknown) => e);
  t.ok(error instanceof ApiError);
  t.equal((error as ApiError).code, 'CONFLICT');
  t.match((error as ApiError).message, /last active superadmin/);
  t.equal((await query<{ status: string }>(cp, 'select status from app_user where id = ?', [superadmin.id]))[0]!.status, 'active');
});

t.test('POST /v1/cdn/admin/users invites a new address: 201 bare record, Location, ETag; an account without password; an e-mailed link; audit-logged', async (t) => {
  const email = uniqueEmail('Invitee').toUpperCase();
  const res = await send(admin, 'POST', '/v1/cdn/admin/users', { email, display_name: 'Grace Ops', role: 'operator' });
  t.equal(res.status, 201, res.text);
  const record = res.body;
  t.match(record, { email: email.toLowerCase(), display_name: 'Grace Ops', role: 'operator', status: 'invited', last_login_at: null });
  t.same(Object.keys(record).sort(), ['created_at', 'display_name', 'email', 'id', 'last_login_at', 'role', 'status', 'updated_at']);
  t.equal(res.headers.get('location'), `/v1/cdn/admin/users/${record.id}`);
  t.ok(res.headers.get('etag'));
  const [row] = await query<Record<string, any>>(cp, 'select status, password_hash, email_verified from app_user where id = ?', [record.id]);
  t.match(row, { status: 'pending_verification', password_hash: null, email_verified: false });
  const roles = (await query<{ role_name: string; granted_by: string }>(cp, 'select role_name, granted_by from user_role where user_id = ? order by role_name', [record.id]));
  t.same(roles.map((r) => r.role_name), ['operator', 'subscriber']);
  t.equal(roles[0]!.granted_by, admin.id);
  const mail = await latestMessage(cp, record.email, INVITE_SUBJECT);
  t.ok(mail, 'the invitation was sent');
  t.match(mail!.text, /Ada Admin has invited you/);
  t.match(mail!.text, /"operator"/);
  t.match(mail!.links[0], /\/accept-invitation\?token=/);
  const token = new URL(mail!.links[0]!).searchParams.get('token')!;
  const stored = await query<{ token_hash: string; expires_at: Date }>(cp, `select token_hash, expires_at from auth_one_time_token where user_id = ? and purpose = 'invitation'`, [record.id]);
  t.equal(stored.length, 1);
  t.not(stored[0]!.token_hash, token, 'stored hashed');
  const days = (new Date(stored[0]!.expires_at).getTime() - Date.now()) / 86_400_000;
  t.ok(days > 6.9 && days <= 7, 'valid for 7 days');
  const [entry] = await auditOf(record.id);
  t.match(entry, { action: 'admin_user.created', actor_id: admin.id, resource_type: 'admin_user', metadata: { invited: true, changes: { role: { to: 'operator' } } } });
  t.notOk(JSON.stringify(entry).includes(token), 'no token in the audit trail');
});

t.test('the invitation flow end to end: login refused before, link → password → login works; the link works once', async (t) => {
  const record = await invite({ role: 'viewer' });
  const before = await send(null, 'POST', '/v1/auth/login', { email: record.email, password: OTHER_PASSWORD });
  t.equal(before.status, 401, 'no password yet');
  const token = await tokenFromLatest(cp, record.email, INVITE_SUBJECT);
  const weak = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: 'short' });
  t.equal(weak.status, 400);
  t.equal(weak.body.errors[0].field, 'new_password');
  const accepted = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD });
  t.equal(accepted.status, 200, accepted.text);
  t.match(accepted.body, { data: { message: /Sign in/ } });
  const session = await login(cp, record.email, OTHER_PASSWORD);
  t.ok(session.accessToken);
  const me = await send(session.accessToken, 'GET', '/v1/users/me');
  t.equal(me.status, 200, 'the invitee manages their own account');
  t.match(me.body.data, { status: 'active', email_verified: true });
  const read = await send(admin, 'GET', `/v1/cdn/admin/users/${record.id}`);
  t.match(read.body, { status: 'active', role: 'viewer' });
  t.ok(read.body.last_login_at, 'last_login_at set by the login');
  const again = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: 'Another-Pass-99' });
  t.equal(again.status, 400);
  t.equal(again.body.errors[0].field, 'token');
  t.same((await auditOf(record.id)).map((e) => e.action), ['admin_user.created', 'admin_user.invitation_accepted']);
  const [accept] = (await auditOf(record.id)).slice(1);
  t.match(accept, { actor_id: record.id, actor_type: 'user' });
});

t.test('invalid and expired invitation tokens are 400 on token and change nothing', async (t) => {
  const record = await invite();
  const token = await tokenFromLatest(cp, record.email, INVITE_SUBJECT);
  for (const bad of ['x'.repeat(43), token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A')]) {
    const res = await send(null, 'POST', '/v1/auth/invitation/accept', { token: bad, new_password: OTHER_PASSWORD });
    t.equal(res.status, 400);
    t.equal(res.body.errors[0].field, 'token');
  }
  t.equal((await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD, extra: 1 })).status, 400);
  await query(cp, `update auth_one_time_token set expires_at = now() - interval '1 second' where user_id = ?`, [record.id]);
  const expired = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD });
  t.equal(expired.status, 400);
  t.equal(expired.body.errors[0].field, 'token');
  const [row] = await query<Record<string, any>>(cp, 'select status, password_hash from app_user where id = ?', [record.id]);
  t.match(row, { status: 'pending_verification', password_hash: null });
});

t.test('an address that already has an account is given the role and told so; a CDN admin user already is a 409', async (t) => {
  const existing = await createLoggedInUser(cp, { display_name: 'Existing Person' });
  const res = await send(admin, 'POST', '/v1/cdn/admin/users', { email: existing.email, display_name: 'Ignored', role: 'viewer' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { id: existing.id, display_name: 'Existing Person', role: 'viewer', status: 'active' });
  t.equal((await messagesTo(cp, existing.email)).filter((m) => INVITE_SUBJECT.test(m.subject)).length, 0, 'no invitation: they have a password');
  const notice = await query<{ type: string }>(cp, 'select type from notification where user_id = ?', [existing.id]);
  t.same(notice.map((n) => n.type), ['cdn_role_granted']);
  await login(cp, existing.email, existing.password);
  const [entry] = await auditOf(existing.id);
  t.match(entry, { action: 'admin_user.created', metadata: { existing_account: true } });

  const before = await rowCounts();
  for (const email of [existing.email, existing.email.toUpperCase(), admin.email]) {
    const again = await send(admin, 'POST', '/v1/cdn/admin/users', { email, role: 'operator' });
    t.equal(again.status, 409, email);
    t.equal(again.body.code, 'CONFLICT');
  }
  t.same(await rowCounts(), before, 'nothing changed');
});

t.test('regression: account pre-hijacking through a CDN role grant; an unconfirmed account registered with a squatter\'s password was given the role', async (t) => {
  // The squatter registers a future staff address with a password of their choosing, signs in, and never confirms it.
  const email = uniqueEmail('future-staff');
  const registered = await send(null, 'POST', '/v1/auth/register', { email, password: OTHER_PASSWORD, accept_terms: true });
  t.equal(registered.status, 201);
  const squatter = await login(cp, email, OTHER_PASSWORD);
  const verification = await tokenFromLatest(cp, email, /^Confirm your e-mail address/);

  // A superadmin adds the address as a CDN admin: the account is invited, not handed the role as it stands.
  const res = await send(superadmin, 'POST', '/v1/cdn/admin/users', { email, role: 'admin' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { email, role: 'admin', status: 'invited' }, 'the record shows the real status');
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${res.body.id}`)).body.status, 'invited');
  const [row] = await query<Record<string, any>>(cp, 'select password_hash, email_verified from app_user where email = ?', [email]);
  t.match(row, { password_hash: null, email_verified: false }, 'the squatter\'s password is gone');
  t.equal((await send(squatter, 'GET', '/v1/users/me')).status, 401, 'their session ended');
  t.equal((await send(null, 'POST', '/v1/auth/login', { email, password: OTHER_PASSWORD })).status, 401, 'their password no longer signs in');
  t.ok((await auditOf(res.body.id)).some((e) => e.action === 'admin_user.created' && e.metadata.invited === true && e.metadata.existing_account === true));

  // The owner confirms the address with the link waiting in the mailbox: still nobody can sign in or use the role.
  t.equal((await send(null, 'POST', '/v1/auth/email/verify', { token: verification })).status, 200);
  t.equal((await send(null, 'POST', '/v1/auth/login', { email, password: OTHER_PASSWORD })).status, 401);

  // The owner accepts the invitation with a password of their own, and only then holds the role.
  const invitation = await tokenFromLatest(cp, email, INVITE_SUBJECT);
  const accepted = await send(null, 'POST', '/v1/auth/invitation/accept', { token: invitation, new_password: 'Owners-Own-Pass-9' });
  t.equal(accepted.status, 200, accepted.text);
  const owner = await login(cp, email, 'Owners-Own-Pass-9');
  t.equal((await send(owner, 'GET', '/v1/cdn/endpoints')).status, 200);
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${res.body.id}`)).body.status, 'active');
  t.equal((await send(null, 'POST', '/v1/auth/login', { email, password: OTHER_PASSWORD })).status, 401, 'the squatter never gets in');
});

t.test('an account confirmed with the link alone keeps a password nobody showed its owner chose, so a CDN role grant invites it instead of granting', async (t) => {
  // The squatter registers a future staff address with their own password; its owner opens the link and confirms with the token alone.
  const email = uniqueEmail('confirmed-staff');
  t.equal((await send(null, 'POST', '/v1/auth/register', { email, password: OTHER_PASSWORD, accept_terms: true })).status, 201);
  const verification = await tokenFromLatest(cp, email, /^Confirm your e-mail address/);
  t.equal((await send(null, 'POST', '/v1/auth/email/verify', { token: verification })).status, 200);
  const squatter = await login(cp, email, OTHER_PASSWORD);

  const res = await send(superadmin, 'POST', '/v1/cdn/admin/users', { email, role: 'admin' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { email, role: 'admin', status: 'invited' });
  const [row] = await query<Record<string, any>>(cp, 'select password_hash, password_confirmed from app_user where email = ?', [email]);
  t.match(row, { password_hash: null, password_confirmed: false }, 'the registrant\'s password is gone');
  t.equal((await send(squatter, 'GET', '/v1/cdn/endpoints')).status, 401, 'their session ended before it could use the role');
  t.equal((await send(null, 'POST', '/v1/auth/login', { email, password: OTHER_PASSWORD })).status, 401);
  const accepted = await send(null, 'POST', '/v1/auth/invitation/accept', { token: await tokenFromLatest(cp, email, INVITE_SUBJECT), new_password: 'Owners-Own-Pass-9' });
  t.equal(accepted.status, 200, accepted.text);
  t.equal((await send(await login(cp, email, 'Owners-Own-Pass-9'), 'GET', '/v1/cdn/endpoints')).status, 200, 'the owner holds the role');
});

t.test('an account confirmed with the password chosen at registration is granted the role as it stands', async (t) => {
  const email = uniqueEmail('registered-staff');
  t.equal((await send(null, 'POST', '/v1/auth/register', { email, password: OTHER_PASSWORD, accept_terms: true })).status, 201);
  const verification = await tokenFromLatest(cp, email, /^Confirm your e-mail address/);
  t.equal((await send(null, 'POST', '/v1/auth/email/verify', { token: verification, password: OTHER_PASSWORD })).status, 200);
  const res = await send(superadmin, 'POST', '/v1/cdn/admin/users', { email, role: 'viewer' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { email, role: 'viewer', status: 'active' });
  t.equal((await send(await login(cp, email, OTHER_PASSWORD), 'GET', '/v1/cdn/endpoints')).status, 200);
});

t.test('accepting an invitation ends every session opened before it', async (t) => {
  const record = await invite({ role: 'viewer' });
  // The invitee has no password, but a reset link reaches the same mailbox and opens a session.
  t.equal((await send(null, 'POST', '/v1/auth/password/forgot', { email: record.email })).status, 200);
  const reset = await send(null, 'POST', '/v1/auth/password/reset', { token: await tokenFromLatest(cp, record.email, /^Reset your/), new_password: OTHER_PASSWORD });
  t.equal(reset.status, 200, reset.text);
  const early = reset.body.access_token as string;
  t.equal((await send(early, 'GET', '/v1/users/me')).status, 200);
  const invitation = await tokenFromLatest(cp, record.email, INVITE_SUBJECT);
  t.equal((await send(null, 'POST', '/v1/auth/invitation/accept', { token: invitation, new_password: 'Owners-Own-Pass-9' })).status, 200);
  t.equal((await send(early, 'GET', '/v1/users/me')).status, 401, 'the earlier session ended');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ? and revoked_at is null', [record.id]), 0);
  await login(cp, record.email, 'Owners-Own-Pass-9');
});

t.test('bad input is a 400 naming the field, and nothing is stored or sent', async (t) => {
  const before = await rowCounts();
  const cases: [Record<string, unknown>, string][] = [
    [{ role: 'viewer' }, 'email'],
    [{ email: 'not-an-address', role: 'viewer' }, 'email'],
    [{ email: `${'a'.repeat(250)}@example.com`, role: 'viewer' }, 'email'],
    [{ email: uniqueEmail(), role: 'viewer', display_name: 'x'.repeat(101) }, 'display_name'],
    [{ email: uniqueEmail(), role: 'viewer', display_name: '' }, 'display_name'],
    [{ email: uniqueEmail(), role: 'viewer', display_name: 'two\nlines' }, 'display_name'],
    [{ email: uniqueEmail() }, 'role'],
    [{ email: uniqueEmail(), role: 'subscriber' }, 'role'],
    [{ email: uniqueEmail(), role: 'root' }, 'role'],
    [{ email: uniqueEmail(), role: 'viewer', password: 'Correct-Horse-42' }, 'password'],
  ];
  for (const [json, field] of cases) {
    const res = await send(admin, 'POST', '/v1/cdn/admin/users', json);
    t.equal(res.status, 400, `${JSON.stringify(json).slice(0, 60)} → 400`);
    t.ok(res.body.errors?.some((e: any) => e.field === field), `names ${field}: ${res.text}`);
  }
  t.same(await rowCounts(), before);
  for (const path of ['/v1/cdn/admin/users?role=subscriber', '/v1/cdn/admin/users?status=suspended', '/v1/cdn/admin/users?sort=password_hash',
    `/v1/cdn/admin/users?q=${'a'.repeat(201)}`, '/v1/cdn/admin/users?limit=101', '/v1/cdn/admin/users?cursor=nope', '/v1/cdn/admin/users/not-a-uuid']) {
    t.equal((await send(admin, 'GET', path)).status, 400, path);
  }
});

t.test('only a superadmin grants or touches superadmin (admin 403, nothing changes)', async (t) => {
  const before = await rowCounts();
  const res = await send(admin, 'POST', '/v1/cdn/admin/users', { email: uniqueEmail(), role: 'superadmin' });
  t.equal(res.status, 403);
  t.equal(res.body.code, 'FORBIDDEN');
  t.same(await rowCounts(), before);

  const other = await invite({ role: 'superadmin' }, superadmin);
  t.equal(other.role, 'superadmin');
  const promote = await invite({ role: 'viewer' });
  for (const [path, json] of [
    [`/v1/cdn/admin/users/${promote.id}`, { role: 'superadmin' }],
    [`/v1/cdn/admin/users/${other.id}`, { role: 'viewer' }],
    [`/v1/cdn/admin/users/${other.id}`, { display_name: 'Renamed' }],
  ] as const) {
    const patch = await send(admin, 'PATCH', path, json);
    t.equal(patch.status, 403, `${path} ${JSON.stringify(json)}`);
  }
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${other.id}/deactivate`)).status, 403);
  t.same((await send(admin, 'GET', `/v1/cdn/admin/users/${other.id}`)).body.role, 'superadmin');
  t.same((await send(admin, 'GET', `/v1/cdn/admin/users/${promote.id}`)).body.role, 'viewer');

  const bySuper = await send(superadmin, 'PATCH', `/v1/cdn/admin/users/${promote.id}`, { role: 'superadmin' });
  t.equal(bySuper.status, 200);
  t.equal(bySuper.body.role, 'superadmin');
  t.equal((await send(superadmin, 'POST', `/v1/cdn/admin/users/${other.id}/deactivate`)).status, 200);
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${other.id}/reactivate`)).status, 403);
  t.equal((await send(superadmin, 'POST', `/v1/cdn/admin/users/${other.id}/reactivate`)).status, 200);
});

t.test('role checks: viewer and operator get 403 everywhere; admin tokens read but people manage people', async (t) => {
  const target = await invite();
  const before = await rowCounts();
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', '/v1/cdn/admin/users')).status, 403);
    t.equal((await send(who, 'GET', `/v1/cdn/admin/users/${target.id}`)).status, 403);
    t.equal((await send(who, 'POST', '/v1/cdn/admin/users', { email: uniqueEmail(), role: 'viewer' })).status, 403);
    t.equal((await send(who, 'PATCH', `/v1/cdn/admin/users/${target.id}`, { display_name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/admin/users/${target.id}/deactivate`)).status, 403);
  }
  t.equal((await send(null, 'GET', '/v1/cdn/admin/users')).status, 401);
  const tokens: Record<string, string> = {};
  for (const role of ['viewer', 'admin']) {
    const res = await send(admin, 'POST', '/v1/cdn/api-tokens', { name: `${role} bot`, role });
    tokens[role] = res.body.token;
  }
  const tokenCounts = await rowCounts();
  t.equal((await send(tokens.viewer!, 'GET', '/v1/cdn/admin/users')).status, 403);
  t.equal((await send(tokens.admin!, 'GET', '/v1/cdn/admin/users')).status, 200);
  t.equal((await send(tokens.admin!, 'GET', `/v1/cdn/admin/users/${target.id}`)).status, 200);
  const byToken = await send(tokens.admin!, 'POST', '/v1/cdn/admin/users', { email: uniqueEmail(), role: 'viewer' });
  t.equal(byToken.status, 403);
  t.match(byToken.body.message, /API tokens/);
  t.equal((await send(tokens.admin!, 'PATCH', `/v1/cdn/admin/users/${target.id}`, { display_name: 'bot' })).status, 403);
  t.equal((await send(tokens.admin!, 'POST', `/v1/cdn/admin/users/${target.id}/deactivate`)).status, 403);
  t.same(await rowCounts(), tokenCounts);
  t.ok(before.audit <= tokenCounts.audit);
});

t.test('Idempotency-Key: a replay answers the first result and invites once; the key with another body is 422', async (t) => {
  const key = crypto.randomUUID();
  const json = { email: uniqueEmail('idem'), role: 'viewer' };
  const first = await send(admin, 'POST', '/v1/cdn/admin/users', json, { 'idempotency-key': key });
  t.equal(first.status, 201);
  const replay = await send(admin, 'POST', '/v1/cdn/admin/users', json, { 'idempotency-key': key });
  t.equal(replay.status, 201);
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  t.same(replay.body, first.body);
  t.equal(await countRows(cp, 'app_user', 'email = ?', [json.email]), 1);
  t.equal((await messagesTo(cp, json.email)).length, 1, 'one invitation');
  const other = await send(admin, 'POST', '/v1/cdn/admin/users', { ...json, role: 'operator' }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
});

t.test('GET /v1/cdn/admin/users lists CDN role holders only, pages, sorts, filters by role and status, and searches', async (t) => {
  const tag = `srch${process.pid}x${Date.now() % 100000}`;
  const a = await invite({ email: `${tag}-alpha@example.org`, display_name: 'Zed Alpha', role: 'viewer' });
  const b = await invite({ email: `${tag}-beta@example.org`, display_name: 'Yan Beta', role: 'operator' });
  const c = await invite({ email: `${tag}-gamma@example.org`, display_name: 'Xu Gamma', role: 'admin' });
  const plain = await createUserDirect(cp, { email: `${tag}-plain@example.org` });

  const all = await send(admin, 'GET', '/v1/cdn/admin/users?limit=100');
  t.equal(all.status, 200);
  const ids = all.body.data.map((u: any) => u.id);
  for (const id of [a.id, b.id, c.id, admin.id, superadmin.id, viewer.id, operator.id]) t.ok(ids.includes(id));
  t.notOk(ids.includes(plain.id), 'a subscriber is no admin user');
  t.notOk(all.text.includes('password'), 'no secrets');
  const created = all.body.data.map((u: any) => u.created_at);
  t.same(created, [...created].sort().reverse(), 'newest first');

  const search = await send(admin, 'GET', `/v1/cdn/admin/users?q=${tag}-beta@example.org`);
  t.same(search.body.data.map((u: any) => u.id), [b.id]);
  const byName = await send(admin, 'GET', `/v1/cdn/admin/users?q=gamma&sort=email`);
  t.ok(byName.body.data.some((u: any) => u.id === c.id));
  const domain = await send(admin, 'GET', `/v1/cdn/admin/users?q=example.org&sort=email&limit=100`);
  const emails = domain.body.data.map((u: any) => u.email);
  t.same(emails, [...emails].sort(), 'sorted by email');
  t.notOk(emails.includes(plain.email));

  const operators = await send(admin, 'GET', '/v1/cdn/admin/users?role=operator&limit=100');
  t.ok(operators.body.data.every((u: any) => u.role === 'operator'));
  t.ok(operators.body.data.some((u: any) => u.id === b.id));
  const admins = await send(admin, 'GET', '/v1/cdn/admin/users?role=admin&limit=100');
  t.ok(admins.body.data.some((u: any) => u.id === admin.id));
  t.notOk(admins.body.data.some((u: any) => u.id === superadmin.id), 'a superadmin shows as superadmin only');

  await send(admin, 'POST', `/v1/cdn/admin/users/${a.id}/deactivate`);
  const deactivated = await send(admin, 'GET', '/v1/cdn/admin/users?status=deactivated&limit=100');
  t.ok(deactivated.body.data.every((u: any) => u.status === 'deactivated'));
  t.ok(deactivated.body.data.some((u: any) => u.id === a.id));
  const active = await send(admin, 'GET', '/v1/cdn/admin/users?status=active&limit=100');
  t.notOk(active.body.data.some((u: any) => u.id === a.id));
  t.notOk(active.body.data.some((u: any) => u.id === b.id), 'an invitee who has not accepted is not active');
  t.ok(active.body.data.every((u: any) => u.status === 'active'));
  t.ok(active.body.data.some((u: any) => u.id === admin.id));
  const invited = await send(admin, 'GET', '/v1/cdn/admin/users?status=invited&limit=100');
  t.ok(invited.body.data.every((u: any) => u.status === 'invited'));
  t.ok(invited.body.data.some((u: any) => u.id === b.id));
  t.notOk(invited.body.data.some((u: any) => u.id === admin.id));

  const page1 = await send(admin, 'GET', '/v1/cdn/admin/users?limit=2&sort=email');
  t.equal(page1.body.data.length, 2);
  t.equal(page1.body.meta.has_more, true);
  const page2 = await send(admin, 'GET', `/v1/cdn/admin/users?limit=2&sort=email&cursor=${page1.body.meta.next_cursor}`);
  t.equal(page2.status, 200);
  t.ok(page2.body.data[0].email > page1.body.data[1].email);
  t.equal(page1.body.meta.total, all.body.meta.total);
});

t.test('GET /v1/cdn/admin/users/{id}: 404 for a user without a CDN role and for unknown ids; ETag and 304', async (t) => {
  const plain = await createUserDirect(cp);
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${plain.id}`)).status, 404);
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${crypto.randomUUID()}`)).status, 404);
  const res = await send(admin, 'GET', `/v1/cdn/admin/users/${operator.id}`);
  t.equal(res.status, 200);
  t.match(res.body, { id: operator.id, role: 'operator', status: 'active' });
  const etag = res.headers.get('etag')!;
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${operator.id}`, undefined, { 'if-none-match': etag })).status, 304);
});

t.test('PATCH /v1/cdn/admin/users/{id}: partial update, role replaced and effective at once, ETag moves, audit-logged', async (t) => {
  const person = await inviteAndAccept({ role: 'operator', display_name: 'Before' });
  const read = await send(admin, 'GET', `/v1/cdn/admin/users/${person.id}`);
  const res = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, { role: 'viewer' }, { 'if-match': read.headers.get('etag')! });
  t.equal(res.status, 200, res.text);
  t.match(res.body, { role: 'viewer', display_name: 'Before' });
  t.not(res.headers.get('etag'), read.headers.get('etag'), 'a role change moves the version');
  const roles = await query<{ role_name: string }>(cp, 'select role_name from user_role where user_id = ? order by role_name', [person.id]);
  t.same(roles.map((r) => r.role_name), ['subscriber', 'viewer']);
  t.equal((await send(person, 'POST', '/v1/cdn/api-tokens', { name: 'x', role: 'viewer' })).status, 403, 'permissions follow the stored role');

  const renamed = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, { display_name: 'After' });
  t.match(renamed.body, { display_name: 'After', role: 'viewer' });
  const cleared = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, { display_name: null });
  t.equal(cleared.body.display_name, null);
  const unchanged = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, {});
  t.equal(unchanged.status, 200);
  const actions = (await auditOf(person.id)).filter((e) => e.action === 'admin_user.updated');
  t.equal(actions.length, 3, 'the empty update records nothing');
  t.same(actions[0]!.metadata.changes, { role: { from: 'operator', to: 'viewer' } });
});

t.test('PATCH with a stale If-Match is 412 and changes nothing; bad input 400; your own role 409', async (t) => {
  const person = await invite({ role: 'operator', display_name: 'Stable' });
  const read = await send(admin, 'GET', `/v1/cdn/admin/users/${person.id}`);
  const etag = read.headers.get('etag')!;
  t.equal((await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, { display_name: 'First' }, { 'if-match': etag })).status, 200);
  const stale = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, { role: 'admin' }, { 'if-match': etag });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  const now = await send(admin, 'GET', `/v1/cdn/admin/users/${person.id}`);
  t.match(now.body, { display_name: 'First', role: 'operator' });

  const before = await rowCounts();
  for (const [json, field] of [
    [{ role: 'owner' }, 'role'], [{ display_name: 'x'.repeat(101) }, 'display_name'], [{ email: 'new@example.com' }, 'email'], [{ status: 'deactivated' }, 'status'],
  ] as const) {
    const res = await send(admin, 'PATCH', `/v1/cdn/admin/users/${person.id}`, json);
    t.equal(res.status, 400, JSON.stringify(json));
    t.ok(res.body.errors.some((e: any) => e.field === field));
  }
  t.equal((await send(admin, 'PATCH', `/v1/cdn/admin/users/${crypto.randomUUID()}`, { display_name: 'x' })).status, 404);
  const self = await send(admin, 'PATCH', `/v1/cdn/admin/users/${admin.id}`, { role: 'viewer' });
  t.equal(self.status, 409);
  t.equal(self.body.code, 'CONFLICT');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/admin/users/${admin.id}`, { display_name: 'Ada A.' })).status, 200, 'your own name is yours');
  t.same({ ...(await rowCounts()), audit: 0 }, { ...before, audit: 0 });
  t.equal((await send(admin, 'GET', `/v1/cdn/admin/users/${admin.id}`)).body.role, 'admin');
});

t.test('deactivate ends sessions and refuses login; reactivate restores it; self and repeated moves are 409', async (t) => {
  const person = await inviteAndAccept({ role: 'admin' });
  t.equal((await send(person, 'GET', '/v1/cdn/admin/users')).status, 200);
  const res = await send(admin, 'POST', `/v1/cdn/admin/users/${person.id}/deactivate`);
  t.equal(res.status, 200, res.text);
  t.match(res.body, { id: person.id, status: 'deactivated', role: 'admin' });
  const refused = await send(person, 'GET', '/v1/cdn/admin/users');
  t.equal(refused.status, 401, 'the session ended at once');
  const loginRes = await send(null, 'POST', '/v1/auth/login', { email: person.email, password: person.password });
  t.equal(loginRes.status, 403);
  t.equal(loginRes.body.code, 'ACCOUNT_SUSPENDED');
  const live = await countRows(cp, 'auth_session', 'user_id = ? and revoked_at is null', [person.id]);
  t.equal(live, 0);
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${person.id}/deactivate`)).status, 409, 'already deactivated');

  const back = await send(admin, 'POST', `/v1/cdn/admin/users/${person.id}/reactivate`);
  t.equal(back.status, 200);
  t.equal(back.body.status, 'active');
  await login(cp, person.email, person.password);
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${person.id}/reactivate`)).status, 409, 'not deactivated');

  const self = await send(admin, 'POST', `/v1/cdn/admin/users/${admin.id}/deactivate`);
  t.equal(self.status, 409);
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${crypto.randomUUID()}/deactivate`)).status, 404);
  const actions = (await auditOf(person.id)).map((e) => e.action).filter((a) => a.startsWith('admin_user.'));
  t.same(actions, ['admin_user.created', 'admin_user.invitation_accepted', 'admin_user.deactivated', 'admin_user.reactivated']);
});

t.test('a deactivated invitee cannot accept the invitation (403) and can after reactivation', async (t) => {
  const record = await invite();
  const token = await tokenFromLatest(cp, record.email, INVITE_SUBJECT);
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${record.id}/deactivate`)).status, 200);
  const refused = await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD });
  t.equal(refused.status, 403);
  t.equal(refused.body.code, 'ACCOUNT_SUSPENDED');
  t.equal((await send(admin, 'POST', `/v1/cdn/admin/users/${record.id}/reactivate`)).status, 200);
  t.equal((await send(null, 'POST', '/v1/auth/invitation/accept', { token, new_password: OTHER_PASSWORD })).status, 200);
  await login(cp, record.email, OTHER_PASSWORD);
});
