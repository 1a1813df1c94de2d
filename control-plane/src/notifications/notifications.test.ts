// Notifications (document 1 §2, §4.5, §6): the list with unread_count and
// paging, marking read/unread (owner only), and notify() honouring the
// notification preferences, with the account-security events wired to it.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, createUserDirect, enableMfa, login, messagesTo, OTHER_PASSWORD, PASSWORD, query,
  RELAXED_LIMITS, RESET_SUBJECT, SUSPENDED_SUBJECT, tokenFromLatest, totpCode,
} from '../../../test/support/auth.ts';
import { systemContext } from '../core/request-context.ts';
import type { NotificationCategory, NotificationType } from './notification.entity.ts';
import { notify, type NotifyInput } from './notify.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

/** notify() as an event of another capability calls it, in a unit of work of its own. */
async function notifyUser(userId: string, input: Partial<NotifyInput> & { category?: NotificationCategory; type?: NotificationType } = {}) {
  const rc = systemContext(cp.app);
  return notify(cp.app, rc, { userId, type: 'payment_failed', title: 'Payment failed', body: 'Your card was declined.', ...input });
}

const list = (token: string, qs = '') => cp.request('GET', `/v1/notifications${qs}`, { headers: bearer(token) });
const rowsOf = (userId: string) => query<{ id: string; type: string; category: string; is_read: boolean; read_at: Date | null }>(cp, 'select * from notification where user_id = ? order by created_at', [userId]);

t.test('POST /v1/users/me/password notifies the owner in the app and by e-mail, after the response', async (t) => {
  const me = await createLoggedInUser(cp);
  const res = await cp.request('POST', '/v1/users/me/password', { headers: bearer(me.accessToken), json: { current_password: PASSWORD, new_password: OTHER_PASSWORD } });
  t.equal(res.status, 200);
  const token = res.body.data.access_token;
  const listed = await list(token);
  t.equal(listed.status, 200);
  t.equal(listed.body.unread_count, 1);
  t.match(listed.body.data, [{ type: 'password_changed', category: 'account_security', priority: 'high', title: 'Your password was changed', is_read: false, read_at: null, expires_at: null }]);
  t.same(Object.keys(listed.body), ['data', 'unread_count', 'meta'], 'the envelope of document 1 §4.5');
  const mails = await messagesTo(cp, me.email);
  t.equal(mails.length, 1);
  t.equal(mails[0]!.subject, 'Your password was changed');
  t.match(mails[0]!.text, /If you did not do this, reset your password/);

  const refused = await cp.request('POST', '/v1/users/me/password', { headers: bearer(token), json: { current_password: 'Wrong-Password-1', new_password: PASSWORD } });
  t.equal(refused.status, 400);
  t.equal((await rowsOf(me.id)).length, 1, 'a refused change notifies nobody');
  t.equal((await messagesTo(cp, me.email)).length, 1);
});

t.test('account_security is delivered even to a user who opted out of it', async (t) => {
  const me = await createLoggedInUser(cp);
  const off = await cp.request('PATCH', '/v1/users/me', { headers: bearer(me.accessToken), json: { notification_preferences: { account_security: false, payment: false, marketing: false, new_content: false } } });
  t.equal(off.status, 200);
  const res = await cp.request('POST', '/v1/users/me/password', { headers: bearer(me.accessToken), json: { current_password: PASSWORD, new_password: OTHER_PASSWORD } });
  t.equal(res.status, 200);
  t.match(await rowsOf(me.id), [{ type: 'password_changed' }]);
  t.equal((await messagesTo(cp, me.email)).length, 1, 'and e-mailed');
});

t.test('notify() honours the preferences: an opted-out category records and sends nothing; new_content stays in the app', async (t) => {
  const user = await createUserDirect(cp);
  // Defaults: payment, new_content and account_security on; marketing off.
  t.match(await notifyUser(user.id), { emailed: true, notification: { type: 'payment_failed', category: 'payment' } });
  t.match(await notifyUser(user.id, { category: 'new_content', title: 'New season', body: 'Season 2 is out.' }), { emailed: false, notification: { category: 'new_content' } });
  t.same(await notifyUser(user.id, { category: 'marketing', title: 'Offer', body: '50% off.' }), { notification: null, emailed: false }, 'marketing is opt-in');
  t.same((await rowsOf(user.id)).map((r) => r.category), ['payment', 'new_content']);
  t.same((await messagesTo(cp, user.email)).map((m) => m.subject), ['Payment failed'], 'only payment was e-mailed');

  await query(cp, `update app_user set notification_preferences = '{"payment": false, "new_content": false, "account_security": true, "marketing": true}'::jsonb where id = ?`, [user.id]);
  t.same(await notifyUser(user.id), { notification: null, emailed: false }, 'payment opted out');
  t.same(await notifyUser(user.id, { category: 'new_content', title: 'x', body: 'y' }), { notification: null, emailed: false }, 'new_content opted out');
  t.match(await notifyUser(user.id, { category: 'marketing', title: 'Offer', body: '50% off.' }), { emailed: true, notification: { category: 'marketing' } }, 'marketing opted in');
  t.same((await rowsOf(user.id)).map((r) => r.category), ['payment', 'new_content', 'marketing']);
  t.same((await messagesTo(cp, user.email)).map((m) => m.subject).sort(), ['Offer', 'Payment failed']);

  await query(cp, `update app_user set status = 'deleted' where id = ?`, [user.id]);
  t.same(await notifyUser(user.id, { type: 'password_changed', title: 'x', body: 'y' }), { notification: null, emailed: false }, 'a deleted account gets nothing');
});

t.test('GET /v1/notifications: newest first, paged, unread_only, expired ones neither listed nor counted', async (t) => {
  const me = await createLoggedInUser(cp);
  const ids: string[] = [];
  for (let i = 0; i < 25; i++) ids.push((await notifyUser(me.id, { category: 'new_content', title: `n${i}`, body: 'b' })).notification!.id);
  // Spread the creation times so the order is the one written, and read the first five.
  await query(cp, `update notification set created_at = now() - (interval '1 minute' * (100 - cast(title_n as int))) from (select id as nid, substr(title, 2) as title_n from notification) x where id = nid and user_id = ?`, [me.id]);
  await query(cp, `update notification set is_read = true, read_at = now() where user_id = ? and title in ('n0', 'n1', 'n2', 'n3', 'n4')`, [me.id]);
  const expired = (await notifyUser(me.id, { category: 'new_content', title: 'gone', body: 'b', expiresAt: new Date(Date.now() + 60_000) })).notification!.id;
  await query(cp, `update notification set expires_at = now() - interval '1 second' where id = ?`, [expired]);
  const later = (await notifyUser(me.id, { category: 'new_content', title: 'later', body: 'b', expiresAt: new Date(Date.now() + 3_600_000) })).notification!;

  const first = await list(me.accessToken, '?limit=10');
  t.equal(first.status, 200);
  t.same(first.body.meta, { total: 26, count: 10, limit: 10, has_more: true, next_cursor: first.body.meta.next_cursor, prev_cursor: null });
  t.equal(first.body.unread_count, 21, '20 unread of the 25 plus the one that has not expired');
  t.same(first.body.data.map((n: { title: string }) => n.title), ['later', 'n24', 'n23', 'n22', 'n21', 'n20', 'n19', 'n18', 'n17', 'n16'], 'newest first');
  t.equal(first.body.data[0].expires_at, later.expires_at!.toISOString());
  const second = await list(me.accessToken, `?limit=10&cursor=${first.body.meta.next_cursor}`);
  const third = await list(me.accessToken, `?limit=10&cursor=${second.body.meta.next_cursor}`);
  t.same(third.body.data.map((n: { title: string }) => n.title), ['n5', 'n4', 'n3', 'n2', 'n1', 'n0']);
  t.equal(third.body.meta.has_more, false);
  const all = [...first.body.data, ...second.body.data, ...third.body.data].map((n: { id: string }) => n.id);
  t.equal(new Set(all).size, 26, 'every notification once');
  t.notOk(all.includes(expired), 'the expired one is not listed');

  const unread = await list(me.accessToken, '?unread_only=true&limit=100');
  t.equal(unread.body.meta.total, 21);
  t.equal(unread.body.unread_count, 21);
  t.ok(unread.body.data.every((n: { is_read: boolean }) => !n.is_read));
  t.equal((await list(me.accessToken, '?unread_only=false')).body.meta.total, 26);

  const other = await createLoggedInUser(cp);
  const theirs = await list(other.accessToken);
  t.same([theirs.body.data, theirs.body.unread_count, theirs.body.meta.total], [[], 0, 0], 'nobody sees another user\'s notifications');
});

t.test('PATCH /v1/notifications/{id} marks read (read_at once) and unread (read_at cleared)', async (t) => {
  const me = await createLoggedInUser(cp);
  const { notification } = await notifyUser(me.id);
  const read = await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(me.accessToken), json: { is_read: true } });
  t.equal(read.status, 200);
  t.match(read.body.data, { id: notification!.id, is_read: true, type: 'payment_failed' });
  const readAt = read.body.data.read_at;
  t.ok(Date.parse(readAt) > 0);
  t.equal((await list(me.accessToken)).body.unread_count, 0);
  const again = await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(me.accessToken), json: { is_read: true } });
  t.equal(again.body.data.read_at, readAt, 'marking read again keeps the first read time');
  const unread = await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(me.accessToken), json: { is_read: false } });
  t.match(unread.body.data, { is_read: false, read_at: null });
  t.match(await rowsOf(me.id), [{ is_read: false, read_at: null }]);
  t.equal((await list(me.accessToken)).body.unread_count, 1);
});

t.test('PATCH /v1/notifications/{id}: another user\'s notification is 404 and unchanged; a global admin may mark it', async (t) => {
  const owner = await createLoggedInUser(cp);
  const intruder = await createLoggedInUser(cp);
  const { notification } = await notifyUser(owner.id);
  const res = await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(intruder.accessToken), json: { is_read: true } });
  t.equal(res.status, 404);
  t.equal(res.body.code, 'NOT_FOUND');
  t.match(await rowsOf(owner.id), [{ is_read: false, read_at: null }], 'unchanged in the database');

  // An admin without the subscriber role: holding it, the type-scoped grant matches first (document 1 §5.3) and ownership applies.
  const admin = await createLoggedInUser(cp, { roles: ['admin'] });
  const byAdmin = await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(admin.accessToken), json: { is_read: true } });
  t.equal(byAdmin.status, 200, 'document 1 §4.0.6: a global admin permission bypasses ownership');
  t.match(await rowsOf(owner.id), [{ is_read: true }]);
});

t.test('PATCH /v1/notifications/{id} of an expired or unknown notification is 404', async (t) => {
  const me = await createLoggedInUser(cp);
  const { notification } = await notifyUser(me.id, { expiresAt: new Date(Date.now() + 60_000) });
  await query(cp, `update notification set expires_at = now() - interval '1 second' where id = ?`, [notification!.id]);
  t.equal((await cp.request('PATCH', `/v1/notifications/${notification!.id}`, { headers: bearer(me.accessToken), json: { is_read: true } })).status, 404);
  t.match(await rowsOf(me.id), [{ is_read: false }]);
  t.equal((await cp.request('PATCH', `/v1/notifications/${crypto.randomUUID()}`, { headers: bearer(me.accessToken), json: { is_read: true } })).status, 404);
});

t.test('bad input to the notification routes is 400 and changes nothing', async (t) => {
  const me = await createLoggedInUser(cp);
  const { notification } = await notifyUser(me.id);
  const path = `/v1/notifications/${notification!.id}`;
  for (const [body, field] of [[{}, 'is_read'], [{ is_read: 'yes' }, 'is_read'], [{ is_read: 1 }, 'is_read'], [{ is_read: true, title: 'x' }, 'title']] as const) {
    const res = await cp.request('PATCH', path, { headers: bearer(me.accessToken), json: body });
    t.equal(res.status, 400, JSON.stringify(body));
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), JSON.stringify(res.body.errors));
  }
  t.equal((await cp.request('PATCH', '/v1/notifications/not-a-uuid', { headers: bearer(me.accessToken), json: { is_read: true } })).status, 400);
  t.match(await rowsOf(me.id), [{ is_read: false, read_at: null }], 'unchanged');
  for (const qs of ['?unread_only=maybe', '?limit=0', '?limit=101', '?cursor=%%%', '?sort=title', '?unread_only=true&unread_only=false']) {
    t.equal((await list(me.accessToken, qs)).status, 400, qs);
  }
  t.equal((await cp.request('GET', '/v1/notifications')).status, 401);
  t.equal((await cp.request('PATCH', path, { json: { is_read: true } })).status, 401);
});

t.test('password reset, MFA on and off, and suspension are notified; the suspension e-mail is sent once', async (t) => {
  const me = await createLoggedInUser(cp);
  const { secret } = await enableMfa(cp, me);
  const disable = await cp.request('POST', '/v1/me/auth/mfa/disable', { headers: bearer(me.accessToken), json: { totp_code: await totpCode(secret, 0) } });
  t.equal(disable.status, 200);

  t.equal((await cp.request('POST', '/v1/auth/password/forgot', { json: { email: me.email } })).status, 200);
  const token = await tokenFromLatest(cp, me.email, RESET_SUBJECT);
  t.equal((await cp.request('POST', '/v1/auth/password/reset', { json: { token, new_password: OTHER_PASSWORD } })).status, 200);
  t.same((await rowsOf(me.id)).map((r) => r.type), ['mfa_enabled', 'mfa_disabled', 'password_reset']);
  const subjects = (await messagesTo(cp, me.email)).map((m) => m.subject);
  for (const subject of ['Two-step verification is on', 'Two-step verification is off', 'Your password was reset']) t.ok(subjects.includes(subject), subject);

  const admin = await createAdmin(cp);
  const suspended = await cp.request('POST', `/v1/admin/users/${me.id}/suspend`, { headers: bearer(admin.accessToken), json: { reason: 'Chargeback fraud' } });
  t.equal(suspended.status, 200);
  const notices = (await messagesTo(cp, me.email)).filter((m) => SUSPENDED_SUBJECT.test(m.subject));
  t.equal(notices.length, 1, 'one suspension e-mail, through notify');
  t.match(notices[0]!.text, /Chargeback fraud/);
  t.match((await rowsOf(me.id)).at(-1), { type: 'account_suspended', category: 'account_security' });
  t.equal((await cp.request('POST', `/v1/admin/users/${me.id}/reinstate`, { headers: bearer(admin.accessToken), json: {} })).status, 200);
  const back = await login(cp, me.email, OTHER_PASSWORD);
  const listed = await list(back.accessToken);
  t.match(listed.body.data[0], { type: 'account_suspended', body: /Chargeback fraud/ }, 'seen in the app once reinstated');

  const quiet = await createUserDirect(cp);
  t.equal((await cp.request('POST', `/v1/admin/users/${quiet.id}/suspend`, { headers: bearer(admin.accessToken), json: { reason: 'Quiet', notify_user: false } })).status, 200);
  t.equal(await countRows(cp, 'notification', 'user_id = ?', [quiet.id]), 0, 'notify_user false: no notification at all');
  t.same(await messagesTo(cp, quiet.email), []);
});

t.test('the OpenAPI document shows both operations and unread_count in the list', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  const get = doc.paths['/v1/notifications'].get;
  const schema = get.responses['200'].content['application/json'].schema;
  t.same(schema.required, ['data', 'unread_count', 'meta']);
  t.match(schema.properties.unread_count, { type: 'integer' });
  t.same(get.parameters.map((p: { name: string }) => p.name).sort(), ['cursor', 'limit', 'unread_only']);
  const patch = doc.paths['/v1/notifications/{notif_id}'].patch;
  t.match(patch.requestBody.content['application/json'].schema, { required: ['is_read'], additionalProperties: false });
  t.ok(patch.responses['404']);
});
