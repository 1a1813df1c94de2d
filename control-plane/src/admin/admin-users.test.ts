import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, createSuperadmin, createUserDirect, messagesTo, query, RELAXED_LIMITS,
  SUSPENDED_SUBJECT, uniqueEmail,
} from '../../../test/support/auth.ts';
import { userSearchDocument } from '../accounts/index.ts';
import { assignRole, removeRole } from '../auth/index.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const admin = await createAdmin(cp);
const superadmin = await createSuperadmin(cp);
const subscriber = await createLoggedInUser(cp);
const asAdmin = (extra: Record<string, string> = {}) => bearer(admin.accessToken, extra);
const asSuper = () => bearer(superadmin.accessToken);
const em = () => cp.database.db.orm.em.fork();

// A small population to filter: a marker in the addresses keeps the queries to this test's rows.
const marker = `flt${Date.now().toString(36)}`;
const people = [
  await createUserDirect(cp, { email: uniqueEmail(`${marker}-a`), country_code: 'FR', display_name: 'Amelie' }),
  await createUserDirect(cp, { email: uniqueEmail(`${marker}-b`), country_code: 'DE', display_name: 'Bruno' }),
  await createUserDirect(cp, { email: uniqueEmail(`${marker}-c`), country_code: 'FR', status: 'suspended' }),
  await createUserDirect(cp, { email: uniqueEmail(`${marker}-d`), country_code: 'FR', roles: ['partner'] }),
  await createUserDirect(cp, { email: uniqueEmail(`${marker}-e`), country_code: 'FR' }),
];
await query(cp, `update app_user set status = 'deleted' where id = ?`, [people[4]!.id]);

t.test('admin routes refuse a subscriber with 403 and an anonymous caller with 401', async (t) => {
  const target = people[0]!.id;
  for (const [method, path, json] of [
    ['GET', '/v1/admin/users', undefined],
    ['GET', `/v1/admin/users/${target}`, undefined],
    ['PATCH', `/v1/admin/users/${target}`, { roles: ['admin'] }],
    ['POST', `/v1/admin/users/${target}/suspend`, { reason: 'x' }],
    ['POST', `/v1/admin/users/${target}/reinstate`, {}],
  ] as const) {
    const res = await cp.request(method, path, { headers: bearer(subscriber.accessToken), json });
    t.equal(res.status, 403, `${method} ${path}`);
    t.equal(res.body.code, 'FORBIDDEN');
    t.equal((await cp.request(method, path, { json })).status, 401, `${method} ${path} anonymous`);
  }
  t.equal(await countRows(cp, 'user_role', `user_id = ? and role_name = 'admin'`, [target]), 0, 'nothing granted');
  t.equal((await query(cp, 'select status from app_user where id = ?', [target]))[0]!.status, 'active', 'nothing suspended');
});

t.test('the roles claim is informational: permissions follow the stored roles on every request', async (t) => {
  const u = await createLoggedInUser(cp);
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(u.accessToken) })).status, 403);
  await assignRole(em(), u.id, 'admin');
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(u.accessToken) })).status, 200, 'the same token, now admin in storage');
  await removeRole(em(), u.id, 'admin');
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(u.accessToken) })).status, 403, 'and no longer');
  await assignRole(em(), u.id, 'admin', { expiresAt: new Date(Date.now() - 1000) });
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(u.accessToken) })).status, 403, 'an expired assignment grants nothing');
});

t.test('GET /v1/admin/users lists with filters, q and paging; deleted accounts excluded by default', async (t) => {
  const list = async (qs: string) => {
    const res = await cp.request('GET', `/v1/admin/users?q=${marker}${qs}`, { headers: asAdmin() });
    t.equal(res.status, 200, qs);
    return res;
  };
  const emails = (res: { body: { data: { email: string }[] } }) => res.body.data.map((u) => u.email).sort();
  const all = await list('');
  t.same(emails(all), people.slice(0, 4).map((p) => p.email).sort(), 'deleted excluded');
  t.match(all.body.meta, { total: 4, count: 4, limit: 20, has_more: false, next_cursor: null });
  t.same(emails(await list('&status=deleted')), [people[4]!.email]);
  t.same(emails(await list('&status=suspended')), [people[2]!.email]);
  t.same(emails(await list('&role=partner')), [people[3]!.email]);
  t.same(emails(await list('&country_code=de')), [people[1]!.email]);
  t.same(emails(await cp.request('GET', '/v1/admin/users?q=Bruno', { headers: asAdmin() })), [people[1]!.email], 'q matches the display name');
  const future = encodeURIComponent(new Date(Date.now() + 60_000).toISOString());
  t.same(emails(await list(`&created_after=${future}`)), []);
  t.equal((await list(`&created_before=${future}`)).body.data.length, 4);

  const page1 = await list('&limit=3&sort=email');
  t.equal(page1.body.data.length, 3);
  t.match(page1.body.meta, { total: 4, count: 3, limit: 3, has_more: true });
  const page2 = await list(`&limit=3&sort=email&cursor=${encodeURIComponent(page1.body.meta.next_cursor)}`);
  t.equal(page2.body.data.length, 1);
  t.same([...page1.body.data, ...page2.body.data].map((u: { email: string }) => u.email), people.slice(0, 4).map((p) => p.email).sort(), 'pages in order, no overlap');
});

t.test('GET /v1/admin/users refuses bad query parameters with 400', async (t) => {
  for (const [qs, field] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['status=gone', 'status'], [`q=${'q'.repeat(201)}`, 'q'], ['created_after=yesterday', 'created_after'], ['role=root', 'role'], ['country_code=FRA', 'country_code'], ['country_code=ZZ', 'country_code'], ['colour=red', 'colour']]) {
    const res = await cp.request('GET', `/v1/admin/users?${qs}`, { headers: asAdmin() });
    t.equal(res.status, 400, qs);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `${qs}: ${JSON.stringify(res.body.errors)}`);
  }
});

t.test('GET /v1/admin/users/{id} reads a user with an ETag; 404 unknown; 400 not a uuid', async (t) => {
  const res = await cp.request('GET', `/v1/admin/users/${people[3]!.id}`, { headers: asAdmin() });
  t.equal(res.status, 200);
  t.match(res.body.data, { id: people[3]!.id, roles: ['partner'] });
  t.ok(res.headers.get('etag'));
  t.equal((await cp.request('GET', `/v1/admin/users/${crypto.randomUUID()}`, { headers: asAdmin() })).status, 404);
  const bad = await cp.request('GET', '/v1/admin/users/42', { headers: asAdmin() });
  t.equal(bad.status, 400);
  t.equal(bad.body.errors[0].field, 'user_id');
});

t.test('PATCH /v1/admin/users/{id} changes roles with an audit record; superadmin needs superadmin scope', async (t) => {
  const target = await createUserDirect(cp);
  const res = await cp.request('PATCH', `/v1/admin/users/${target.id}`, { headers: asAdmin(), json: { roles: ['subscriber', 'partner'] } });
  t.equal(res.status, 200);
  t.same(res.body.data.roles, ['partner', 'subscriber']);
  t.equal(await countRows(cp, 'audit_log', `action = 'user.roles_changed' and resource_id = ? and actor_id = ?`, [target.id, admin.id]), 1, 'audit-logged with the actor');

  const raise = await cp.request('PATCH', `/v1/admin/users/${target.id}`, { headers: asAdmin(), json: { roles: ['subscriber', 'superadmin'] } });
  t.equal(raise.status, 403, 'an admin cannot grant superadmin');
  t.equal(await countRows(cp, 'user_role', `user_id = ? and role_name = 'superadmin'`, [target.id]), 0);
  const bySuper = await cp.request('PATCH', `/v1/admin/users/${target.id}`, { headers: asSuper(), json: { roles: ['subscriber', 'superadmin'] } });
  t.equal(bySuper.status, 200, 'a superadmin can');
  t.ok(bySuper.body.data.roles.includes('superadmin'));
  const touchSuper = await cp.request('PATCH', `/v1/admin/users/${target.id}`, { headers: asAdmin(), json: { roles: ['subscriber'] } });
  t.equal(touchSuper.status, 403, 'an admin cannot re-role a superadmin');
  t.equal((await cp.request('POST', `/v1/admin/users/${target.id}/suspend`, { headers: asAdmin(), json: { reason: 'x' } })).status, 403, 'nor suspend one');

  const etag = (await cp.request('GET', `/v1/admin/users/${people[1]!.id}`, { headers: asAdmin() })).headers.get('etag')!;
  await query(cp, 'update app_user set version = version + 1 where id = ?', [people[1]!.id]);
  const stale = await cp.request('PATCH', `/v1/admin/users/${people[1]!.id}`, { headers: asAdmin({ 'if-match': etag }), json: { roles: ['partner'] } });
  t.equal(stale.status, 412, 'If-Match is honoured');
  for (const [body, field] of [[{ roles: ['root'] }, 'roles[0]'], [{ roles: [] }, 'roles'], [{ status: 'deleted' }, 'status'], [{ email: 'x@example.com' }, 'email']] as const) {
    const bad = await cp.request('PATCH', `/v1/admin/users/${people[1]!.id}`, { headers: asAdmin(), json: body });
    t.equal(bad.status, 400, JSON.stringify(body));
    t.ok(bad.body.errors.some((e: { field: string }) => e.field === field), JSON.stringify(bad.body.errors));
  }
  t.same((await cp.request('GET', `/v1/admin/users/${people[1]!.id}`, { headers: asAdmin() })).body.data.roles, ['subscriber'], 'unchanged');
});

t.test('regression: a role change left the ETag and updated_at unchanged (304 to the old ETag, 200 to a stale If-Match); it moves the version now', async (t) => {
  const target = await createUserDirect(cp);
  const path = `/v1/admin/users/${target.id}`;
  const before = await cp.request('GET', path, { headers: asAdmin() });
  const etag = before.headers.get('etag')!;
  t.equal((await cp.request('GET', path, { headers: asAdmin({ 'if-none-match': etag }) })).status, 304, 'unchanged: 304');

  const changed = await cp.request('PATCH', path, { headers: asAdmin({ 'if-match': etag }), json: { roles: ['subscriber', 'partner'] } });
  t.equal(changed.status, 200);
  t.not(changed.headers.get('etag'), etag, 'a new ETag');
  t.ok(new Date(changed.body.data.updated_at) > new Date(before.body.data.updated_at), 'updated_at moved');

  const reread = await cp.request('GET', path, { headers: asAdmin({ 'if-none-match': etag }) });
  t.equal(reread.status, 200, 'the old ETag no longer matches: the new roles are sent');
  t.same(reread.body.data.roles, ['partner', 'subscriber']);
  t.equal(reread.headers.get('etag'), changed.headers.get('etag'));

  // A second administrator still holding the first version cannot overwrite the change.
  const overwrite = await cp.request('PATCH', path, { headers: asAdmin({ 'if-match': etag }), json: { roles: ['subscriber'] } });
  t.equal(overwrite.status, 412, 'a stale If-Match is refused');
  t.same((await cp.request('GET', path, { headers: asAdmin() })).body.data.roles, ['partner', 'subscriber'], 'and changes nothing');

  const same = await cp.request('PATCH', path, { headers: asAdmin({ 'if-match': changed.headers.get('etag')! }), json: { roles: ['partner', 'subscriber'] } });
  t.equal(same.status, 200);
  t.equal(same.headers.get('etag'), changed.headers.get('etag'), 'asking for the roles it holds changes nothing');
});

t.test('POST /v1/admin/users/{id}/suspend: tokens refused at once, login 403, notice e-mail, audit record', async (t) => {
  const victim = await createLoggedInUser(cp, { display_name: 'Victor' });
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(victim.accessToken) })).status, 200);
  const res = await cp.request('POST', `/v1/admin/users/${victim.id}/suspend`, { headers: asAdmin(), json: { reason: 'Chargeback fraud' } });
  t.equal(res.status, 200);
  t.equal(res.body.data.status, 'suspended');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(victim.accessToken) })).status, 401, 'the access token is refused at once');
  t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: { cookie: `refresh_token=${victim.refreshToken}` } })).status, 401, 'the session is over');
  const login = await cp.request('POST', '/v1/auth/login', { json: { email: victim.email, password: victim.password } });
  t.equal(login.status, 403);
  t.equal(login.body.code, 'ACCOUNT_SUSPENDED');
  const mails = await messagesTo(cp, victim.email);
  t.equal(mails.length, 1);
  t.match(mails[0]!.subject, SUSPENDED_SUBJECT);
  t.match(mails[0]!.text, /Chargeback fraud/);
  const [audit] = await query<{ actor_id: string; metadata: { reason: string } }>(cp, `select actor_id, metadata from audit_log where action = 'user.suspended' and resource_id = ?`, [victim.id]);
  t.equal(audit!.actor_id, admin.id);
  t.equal(audit!.metadata.reason, 'Chargeback fraud');

  const reinstated = await cp.request('POST', `/v1/admin/users/${victim.id}/reinstate`, { headers: asAdmin(), json: { note: 'Resolved with the bank' } });
  t.equal(reinstated.status, 200);
  t.equal(reinstated.body.data.status, 'active');
  t.equal(await countRows(cp, 'audit_log', `action = 'user.reinstated' and resource_id = ? and actor_id = ?`, [victim.id, admin.id]), 1);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: victim.email, password: victim.password } })).status, 200, 'login works again');
  t.equal((await cp.request('POST', `/v1/admin/users/${victim.id}/reinstate`, { headers: asAdmin(), json: {} })).status, 409, 'reinstating an active account is a conflict');
});

t.test('suspend with notify_user false sends nothing; an admin cannot suspend themself; bad bodies are 400', async (t) => {
  const quiet = await createUserDirect(cp);
  const res = await cp.request('POST', `/v1/admin/users/${quiet.id}/suspend`, { headers: asAdmin(), json: { reason: 'Quiet', notify_user: false } });
  t.equal(res.status, 200);
  t.same(await messagesTo(cp, quiet.email), []);
  t.equal((await cp.request('POST', `/v1/admin/users/${admin.id}/suspend`, { headers: asAdmin(), json: { reason: 'oops' } })).status, 409);
  const target = people[0]!.id;
  for (const [body, field] of [[{}, 'reason'], [{ reason: 'r'.repeat(501) }, 'reason'], [{ reason: 7 }, 'reason'], [{ reason: 'x', notify_user: 'no' }, 'notify_user']] as const) {
    const bad = await cp.request('POST', `/v1/admin/users/${target}/suspend`, { headers: asAdmin(), json: body });
    t.equal(bad.status, 400, JSON.stringify(body));
    t.ok(bad.body.errors.some((e: { field: string }) => e.field === field));
  }
  const badNote = await cp.request('POST', `/v1/admin/users/${people[2]!.id}/reinstate`, { headers: asAdmin(), json: { note: 'n'.repeat(501) } });
  t.equal(badNote.status, 400);
  t.equal((await query(cp, 'select status from app_user where id = ?', [target]))[0]!.status, 'active', 'nothing suspended');
  t.equal((await query(cp, 'select status from app_user where id = ?', [people[2]!.id]))[0]!.status, 'suspended', 'nothing reinstated');
});

t.test('PATCH /v1/admin/users/{id} status suspends and reinstates', async (t) => {
  const u = await createLoggedInUser(cp);
  const s = await cp.request('PATCH', `/v1/admin/users/${u.id}`, { headers: asAdmin(), json: { status: 'suspended' } });
  t.equal(s.status, 200);
  t.equal(s.body.data.status, 'suspended');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(u.accessToken) })).status, 401, 'tokens refused at once');
  const r = await cp.request('PATCH', `/v1/admin/users/${u.id}`, { headers: asAdmin(), json: { status: 'active' } });
  t.equal(r.status, 200);
  t.equal(r.body.data.status, 'active');
});

// Regression tests of "admin q is a substring match where the spec says full text" (issue 12).
t.test('GET /v1/admin/users q is a full-text search: whole words of the name and address, the full address or its domain, any case', async (t) => {
  const domain = `${marker}.example.org`;
  const grace = await createUserDirect(cp, { email: `grace.hopper@${domain}`, display_name: 'Grace Brewster Murray' });
  const alan = await createUserDirect(cp, { email: `alan.turing@${domain}`, display_name: 'Alan Mathison' });
  const search = async (q: string) => {
    const res = await cp.request('GET', `/v1/admin/users?q=${encodeURIComponent(q)}&limit=100`, { headers: asAdmin() });
    t.equal(res.status, 200, q);
    return (res.body.data as { email: string }[]).map((u) => u.email).filter((e) => e.endsWith(domain)).sort();
  };
  for (const q of ['grace', 'hopper', 'GRACE', 'Murray', `grace.hopper@${domain}`, `Grace.Hopper@${domain.toUpperCase()}`, 'grace hopper', '"grace hopper"']) {
    t.same(await search(q), [grace.email], `found by ${q}`);
  }
  t.same(await search(domain), [alan.email, grace.email].sort(), 'the domain finds both');
  t.same(await search('turing or hopper'), [alan.email, grace.email].sort(), 'or');
  t.same(await search(`${marker} -hopper`), [alan.email], 'a word can be excluded');
  for (const q of ['hopp', 'race', 'example.or', 'hopper grace alan']) {
    t.same(await search(q), [], `no substring or partial-word match: ${q}`);
  }
  t.same(await search(`'"&|!():*\\<-> %_`), [], 'query syntax characters are plain input, never an error');
});

t.test('GET /v1/admin/users q is served by the full-text index', async (t) => {
  const plan = await em().transactional(async (tx) => {
    await tx.execute('set local enable_seqscan = off');
    const rows = await tx.execute<{ 'QUERY PLAN': string }[]>(
      `explain select id from app_user u0 where ${userSearchDocument('u0')} @@ websearch_to_tsquery('simple', ?)`, ['grace']);
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  });
  t.match(plan, /app_user_search_idx/, plan);
});
