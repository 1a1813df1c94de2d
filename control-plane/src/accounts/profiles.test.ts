// Viewing profiles (document 1 §4.2) through the real server on PostgreSQL and
// Redis: the primary profile on every path that creates an account, the
// operations, the plan's profile limit (subscriptions inserted directly: no
// billing routes yet), ownership, bad input and the OpenAPI document.
// verify-pin and profile tokens: auth/profile-pin.test.ts.
import t from 'tap';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { createTestDatabase } from '../../../test/support/database.ts';
import { detectServices } from '../../../test/support/services.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, query, register, RELAXED_LIMITS, type TestAccount, uniqueEmail,
} from '../../../test/support/auth.ts';
import { createAdminArgs, createAdminCommand, ensureFirstSuperadmin } from '../admin/index.ts';
import { syncRoleCatalog } from '../auth/index.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

const auth = (account: TestAccount, extra: Record<string, string> = {}) => bearer(account.accessToken, extra);
const profilesOf = (userId: string) => query(cp, 'select * from profile where user_id = ? order by is_primary desc, created_at, id', [userId]);
const profileRow = async (id: string) => (await query(cp, 'select * from profile where id = ?', [id]))[0];
const create = (account: TestAccount, json: unknown) => cp.request('POST', '/v1/users/me/profiles', { headers: auth(account), json });

/** A user whose plan allows `limit` profiles (one live svod subscription carrying that limit). */
async function userWithLimit(limit: number): Promise<TestAccount> {
  const account = await createLoggedInUser(cp);
  await insertSubscription(cp, account.id, { type: 'svod', status: 'active', max_profiles: limit });
  return account;
}

let planSequence = 0;
/** A subscription row (and its plan) straight into the database, carrying max_profiles as its terms. */
async function insertSubscription(cp: TestControlPlane, userId: string, terms: { type: string; status: string; max_profiles: number }): Promise<void> {
  planSequence += 1;
  const planId = crypto.randomUUID();
  const now = new Date();
  const periodEnd = new Date(now.getTime() + 30 * 86_400_000);
  await query(cp, `insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
                     max_quality, has_downloads, has_ads, is_active, created_at, updated_at)
                   values (?, ?, ?, 999, 'EUR', 'monthly', ?, 2, 5, 'HD', false, false, true, ?, ?)`,
  [planId, `Plan ${planSequence}`, terms.type, terms.max_profiles, now, now]);
  await query(cp, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles,
                     max_concurrent_streams, max_devices, current_period_start, current_period_end, created_at, updated_at)
                   values (?, ?, ?, ?, ?, 999, 'EUR', 'monthly', ?, 2, 5, ?, ?, ?, ?)`,
  [crypto.randomUUID(), userId, planId, terms.type, terms.status, terms.max_profiles, now, periodEnd, now, now]);
}

// ---- the primary profile ---------------------------------------------------------

t.test('GET /v1/users/me/profiles lists the primary profile every account is created with', async (t) => {
  const a = await createLoggedInUser(cp, { display_name: 'Ada Lovelace' });
  const res = await cp.request('GET', '/v1/users/me/profiles', { headers: auth(a) });
  t.equal(res.status, 200);
  t.equal(res.body.meta, undefined, 'not paged');
  t.equal(res.body.data.length, 1);
  const [primary] = res.body.data;
  t.same(Object.keys(primary).sort(), [
    'autoplay_next_episode', 'avatar_preset_id', 'content_rating_limit', 'created_at', 'id', 'is_kids', 'is_primary', 'language', 'name', 'pin_protected', 'updated_at',
  ]);
  t.match(primary, {
    name: 'Ada Lovelace', is_primary: true, pin_protected: false, content_rating_limit: 'TV-MA', is_kids: false,
    autoplay_next_episode: true, avatar_preset_id: null, language: null,
  });
  t.equal((await cp.request('GET', '/v1/users/me/profiles')).status, 401, 'needs a caller');
});

t.test('POST /v1/auth/register creates the primary profile with the account, and none for a taken address', async (t) => {
  const named = await register(cp, { body: { display_name: 'Grace Hopper' } });
  t.match(await profilesOf(named.id), [{ name: 'Grace Hopper', is_primary: true, pin_hash: null }]);

  const email = uniqueEmail('no.name');
  const unnamed = await register(cp, { email });
  t.match(await profilesOf(unnamed.id), [{ name: email.slice(0, email.indexOf('@')), is_primary: true }], 'named after the address\'s local part');

  const long = await register(cp, { body: { display_name: `${'Ж'.repeat(49)}😀 and more` } });
  t.equal((await profilesOf(long.id))[0]!.name, `${'Ж'.repeat(49)}😀`, 'a long display name is cut to 50 characters, never inside a character');

  const again = await cp.request('POST', '/v1/auth/register', { json: { email: named.email, password: named.password, accept_terms: true, display_name: 'Intruder' } });
  t.equal(again.status, 201, 'the same answer for a taken address');
  t.equal(await countRows(cp, 'profile', 'user_id = ?', [named.id]), 1, 'the owner still has one profile');
  t.equal(await countRows(cp, 'profile', `name = 'Intruder'`), 0, 'and nobody got one named by the attempt');
});

t.test('the first superadmin and admin:create accounts get their primary profile, once', async (t) => {
  const { postgresUrl } = await detectServices();
  const fresh = await createTestDatabase({ postgresUrl });
  t.teardown(() => fresh.dispose());
  const conn = () => fresh.db.orm.em.fork().getConnection();
  await syncRoleCatalog(fresh.db.orm.em.fork()); // as the control plane does at start
  const created = await ensureFirstSuperadmin(fresh.db, 'Root.Admin@Example.com');
  t.ok(created, 'a fresh database gets its first superadmin');
  const rows = await conn().execute(`select p.name, p.is_primary from profile p join app_user u on u.id = p.user_id where u.email = 'root.admin@example.com'`);
  t.same(rows, [{ name: 'root.admin', is_primary: true }]);
  t.equal(await ensureFirstSuperadmin(fresh.db, 'root.admin@example.com'), undefined, 'not twice');
  const io = { out: () => {}, err: () => {} };
  await createAdminCommand.run({ db: fresh.db, publicUrl: 'http://localhost', io }, createAdminArgs.parse({ email: 'root.admin@example.com', role: 'admin' }));
  t.equal((await conn().execute(`select count(*)::int as n from profile`))[0].n, 1, 'granting a role to an existing account adds no profile');
  await createAdminCommand.run({ db: fresh.db, publicUrl: 'http://localhost', io }, createAdminArgs.parse({ email: 'ops@example.com', display_name: 'Ops Team', role: 'admin' }));
  t.same(await conn().execute(`select p.name from profile p join app_user u on u.id = p.user_id where u.email = 'ops@example.com' and p.is_primary`), [{ name: 'Ops Team' }],
    'admin:create names it after the display name');
});

t.test('migration 0006 gives every account created before it its primary profile', { skip: !(await detectServices()).postgresUrl && 'needs PostgreSQL' }, async (t) => {
  const { postgresUrl } = await detectServices();
  const old = await createTestDatabase({ postgresUrl });
  t.teardown(() => old.dispose());
  const conn = () => old.db.orm.em.fork().getConnection();
  await old.db.orm.migrator.down({ to: '0005-billing-model' });
  const insert = (email: string, displayName: string | null) => conn().execute(
    `insert into app_user (id, email, display_name, notification_preferences, created_at, updated_at) values (gen_random_uuid(), ?, ?, '{}'::jsonb, now(), now())`,
    [email, displayName]);
  await insert('named@example.com', 'Named Person');
  await insert('blank.name@example.com', '   ');
  await insert(`${'l'.repeat(60)}@example.com`, null);
  await insert('long@example.com', `${'n'.repeat(49)} tail`);
  await old.db.orm.migrator.up();
  type Row = { email: string; name: string; is_primary: boolean; content_rating_limit: string; is_kids: boolean; autoplay_next_episode: boolean };
  const rows = await conn().execute<Row[]>(`select u.email, p.name, p.is_primary, p.content_rating_limit, p.is_kids, p.autoplay_next_episode
                                       from app_user u join profile p on p.user_id = u.id order by u.email`);
  t.same(rows.map((r) => [r.email, r.name]), [
    ['blank.name@example.com', 'blank.name'],
    [`${'l'.repeat(60)}@example.com`, 'l'.repeat(50)],
    ['long@example.com', 'n'.repeat(49)],
    ['named@example.com', 'Named Person'],
  ]);
  t.ok(rows.every((r) =>
    r.is_primary && r.content_rating_limit === 'TV-MA' && !r.is_kids && r.autoplay_next_episode), 'primary, with the defaults');
});

// ---- create -------------------------------------------------------------------------

t.test('POST /v1/users/me/profiles creates a profile: 201 with Location, defaults, the PIN stored hashed and never returned', async (t) => {
  const a = await userWithLimit(4);
  const avatar = crypto.randomUUID();
  const res = await create(a, { name: '  Kids  ', avatar_preset_id: avatar, pin: '0420', content_rating_limit: 'TV-Y', language: 'en-GB', is_kids: true, autoplay_next_episode: false });
  t.equal(res.status, 201, res.text);
  const profile = res.body.data;
  t.equal(res.headers.get('location'), `/v1/users/me/profiles/${profile.id}`);
  t.match(profile, { name: 'Kids', avatar_preset_id: avatar, is_primary: false, pin_protected: true, content_rating_limit: 'TV-Y', language: 'en-GB', is_kids: true, autoplay_next_episode: false });
  t.notOk('pin' in profile, 'the PIN is never returned');
  t.notOk(res.text.includes('0420'), 'nor any trace of it');
  const stored = await profileRow(profile.id);
  t.match(stored.pin_hash, /^[0-9a-f]{64}$/, 'a keyed hash is stored');

  const plain = await create(a, { name: 'Plain', pin: '0420' });
  t.not((await profileRow(plain.body.data.id)).pin_hash, stored.pin_hash, 'the same PIN on two profiles does not hash alike');

  const defaults = await create(a, { name: 'Defaults' });
  t.equal(defaults.status, 201);
  t.match(defaults.body.data, { pin_protected: false, content_rating_limit: 'TV-MA', is_kids: false, autoplay_next_episode: true, avatar_preset_id: null, language: null, is_primary: false });
  const read = await cp.request('GET', `/v1/users/me/profiles/${profile.id}`, { headers: auth(a) });
  t.equal(read.status, 200);
  t.same(read.body.data, profile, 'read back as created');
  t.match(read.headers.get('etag'), /^"/, 'with an ETag');
  const listed = await cp.request('GET', '/v1/users/me/profiles', { headers: auth(a) });
  t.same(listed.body.data.map((p: { name: string }) => p.name), [a.email.split('@')[0], 'Kids', 'Plain', 'Defaults'], 'the primary first, then in creation order');
});

t.test('POST /v1/users/me/profiles refuses a profile beyond the plan limit: one profile without a subscription', async (t) => {
  const a = await createLoggedInUser(cp);
  const res = await create(a, { name: 'Second' });
  t.equal(res.status, 409);
  t.equal(res.body.code, 'PROFILE_LIMIT_REACHED');
  t.equal(await countRows(cp, 'profile', 'user_id = ?', [a.id]), 1, 'nothing stored');
});

t.test('POST /v1/users/me/profiles allows the highest max_profiles of the live subscriptions; canceled and expired ones do not count', async (t) => {
  const a = await createLoggedInUser(cp);
  await insertSubscription(cp, a.id, { type: 'svod', status: 'active', max_profiles: 2 });
  await insertSubscription(cp, a.id, { type: 'live', status: 'past_due', max_profiles: 3 });
  await insertSubscription(cp, a.id, { type: 'addon', status: 'paused', max_profiles: 1 });
  await insertSubscription(cp, a.id, { type: 'svod', status: 'canceled', max_profiles: 6 });
  await insertSubscription(cp, a.id, { type: 'ppv', status: 'expired', max_profiles: 5 });
  t.equal((await create(a, { name: 'Two' })).status, 201);
  t.equal((await create(a, { name: 'Three' })).status, 201);
  const fourth = await create(a, { name: 'Four' });
  t.equal(fourth.status, 409, 'the limit is 3 (past_due counts; canceled and expired do not)');
  t.equal(fourth.body.code, 'PROFILE_LIMIT_REACHED');
  t.equal(await countRows(cp, 'profile', 'user_id = ?', [a.id]), 3);

  const trial = await createLoggedInUser(cp);
  await insertSubscription(cp, trial.id, { type: 'svod', status: 'trialing', max_profiles: 2 });
  t.equal((await create(trial, { name: 'Trial' })).status, 201, 'a trial counts');
  t.equal((await create(trial, { name: 'Over' })).status, 409);
});

t.test('POST /v1/users/me/profiles never passes the limit under concurrent creates', async (t) => {
  const a = await userWithLimit(3);
  const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => create(a, { name: `Racer ${i}` })));
  const statuses = answers.map((r) => r.status).sort();
  t.same(statuses, [201, 201, 409, 409, 409, 409, 409, 409], 'two fit beside the primary');
  t.ok(answers.filter((r) => r.status === 409).every((r) => r.body.code === 'PROFILE_LIMIT_REACHED'));
  t.equal(await countRows(cp, 'profile', 'user_id = ?', [a.id]), 3);
});

// ---- bad input ----------------------------------------------------------------------

const badBodies: [string, unknown, string][] = [
  ['a missing name', { is_kids: true }, 'name'],
  ['an empty name', { name: '   ' }, 'name'],
  ['a name over 50 characters', { name: 'x'.repeat(51) }, 'name'],
  ['a name of two lines', { name: 'Line\nbreak' }, 'name'],
  ['a name of the wrong type', { name: 7 }, 'name'],
  ['a PIN of 3 digits', { name: 'P', pin: '123' }, 'pin'],
  ['a PIN of 7 digits', { name: 'P', pin: '1234567' }, 'pin'],
  ['a PIN with letters', { name: 'P', pin: '12a4' }, 'pin'],
  ['a PIN as a number', { name: 'P', pin: 1234 }, 'pin'],
  ['a PIN with Unicode digits', { name: 'P', pin: '١٢٣٤' }, 'pin'],
  ['an unknown content rating', { name: 'P', content_rating_limit: 'X' }, 'content_rating_limit'],
  ['a lower-case content rating', { name: 'P', content_rating_limit: 'tv-ma' }, 'content_rating_limit'],
  ['an avatar that is not a uuid', { name: 'P', avatar_preset_id: 'cat.png' }, 'avatar_preset_id'],
  ['a language that is not BCP 47', { name: 'P', language: 'english!' }, 'language'],
  ['is_kids as a string', { name: 'P', is_kids: 'yes' }, 'is_kids'],
  ['autoplay_next_episode as a number', { name: 'P', autoplay_next_episode: 1 }, 'autoplay_next_episode'],
  ['is_primary (read-only)', { name: 'P', is_primary: true }, 'is_primary'],
  ['pin_protected (read-only)', { name: 'P', pin_protected: false }, 'pin_protected'],
  ['an unknown field', { name: 'P', maturity: 'adult' }, 'maturity'],
];

t.test('POST /v1/users/me/profiles refuses bad input with 400 naming the field, storing nothing', async (t) => {
  const a = await userWithLimit(6);
  for (const [what, body, field] of badBodies) {
    const res = await create(a, body);
    t.equal(res.status, 400, what);
    t.equal(res.body.code, 'VALIDATION_ERROR', what);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `${what}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await countRows(cp, 'profile', 'user_id = ?', [a.id]), 1, 'only the primary');
});

t.test('PUT /v1/users/me/profiles/{id} refuses bad input with 400 naming the field, changing nothing', async (t) => {
  const a = await userWithLimit(2);
  const id = (await create(a, { name: 'Target', pin: '1234' })).body.data.id;
  const before = await profileRow(id);
  for (const [what, body, field] of badBodies) {
    const res = await cp.request('PUT', `/v1/users/me/profiles/${id}`, { headers: auth(a), json: body });
    t.equal(res.status, 400, what);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `${what}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await profileRow(id), before, 'row unchanged');
});

t.test('profile routes refuse a profile_id that is not a uuid with 400', async (t) => {
  const a = await createLoggedInUser(cp);
  for (const [method, json] of [['GET'], ['PUT', { name: 'X' }], ['DELETE']] as const) {
    const res = await cp.request(method, '/v1/users/me/profiles/not-a-uuid', { headers: auth(a), json });
    t.equal(res.status, 400, method);
    t.ok(res.body.errors.some((e: { field: string }) => e.field === 'profile_id'), method);
  }
});

// ---- read, update ---------------------------------------------------------------------

t.test('PUT /v1/users/me/profiles/{id} takes the create body: given fields change, left-out ones stay, null clears', async (t) => {
  const a = await userWithLimit(2);
  const avatar = crypto.randomUUID();
  const created = (await create(a, { name: 'Teen', avatar_preset_id: avatar, content_rating_limit: 'TV-14', language: 'fr', is_kids: true, autoplay_next_episode: false })).body.data;

  const renamed = await cp.request('PUT', `/v1/users/me/profiles/${created.id}`, { headers: auth(a), json: { name: 'Teenager' } });
  t.equal(renamed.status, 200, renamed.text);
  t.match(renamed.body.data, { name: 'Teenager', avatar_preset_id: avatar, content_rating_limit: 'TV-14', language: 'fr', is_kids: true, autoplay_next_episode: false },
    'a rename keeps the rating limit and the rest');
  t.not(renamed.body.data.updated_at, created.updated_at);

  const changed = await cp.request('PUT', `/v1/users/me/profiles/${created.id}`, {
    headers: auth(a), json: { name: 'Adult', avatar_preset_id: null, language: null, content_rating_limit: 'R', is_kids: false, autoplay_next_episode: true },
  });
  t.equal(changed.status, 200);
  t.match(changed.body.data, { name: 'Adult', avatar_preset_id: null, language: null, content_rating_limit: 'R', is_kids: false, autoplay_next_episode: true, is_primary: false });
  t.same((await cp.request('GET', `/v1/users/me/profiles/${created.id}`, { headers: auth(a) })).body.data, changed.body.data, 'stored');

  const locked = await cp.request('PUT', `/v1/users/me/profiles/${created.id}`, { headers: auth(a), json: { name: 'Adult', pin: '98765' } });
  t.equal(locked.status, 200);
  t.equal(locked.body.data.pin_protected, true, 'a PIN set on an open profile needs no token');
  t.notOk('pin' in locked.body.data);
});

t.test('PUT /v1/users/me/profiles/{id} renames the primary profile, which stays primary', async (t) => {
  const a = await createLoggedInUser(cp);
  const [primary] = (await cp.request('GET', '/v1/users/me/profiles', { headers: auth(a) })).body.data;
  const res = await cp.request('PUT', `/v1/users/me/profiles/${primary.id}`, { headers: auth(a), json: { name: 'Me', is_kids: false } });
  t.equal(res.status, 200);
  t.match(res.body.data, { name: 'Me', is_primary: true });
});

t.test('PUT /v1/users/me/profiles/{id} honours If-Match: a stale ETag gets 412 and changes nothing', async (t) => {
  const a = await createLoggedInUser(cp);
  const [primary] = (await cp.request('GET', '/v1/users/me/profiles', { headers: auth(a) })).body.data;
  const etag = (await cp.request('GET', `/v1/users/me/profiles/${primary.id}`, { headers: auth(a) })).headers.get('etag')!;
  const first = await cp.request('PUT', `/v1/users/me/profiles/${primary.id}`, { headers: auth(a, { 'if-match': etag }), json: { name: 'First' } });
  t.equal(first.status, 200);
  t.not(first.headers.get('etag'), etag, 'the ETag moves with the record');
  const stale = await cp.request('PUT', `/v1/users/me/profiles/${primary.id}`, { headers: auth(a, { 'if-match': etag }), json: { name: 'Second' } });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  t.equal((await profileRow(primary.id)).name, 'First');
});

// ---- delete -----------------------------------------------------------------------------

t.test('DELETE /v1/users/me/profiles/{id} removes the profile with its watchlist and progress', async (t) => {
  const a = await userWithLimit(3);
  const doomed = (await create(a, { name: 'Doomed' })).body.data.id;
  const kept = (await create(a, { name: 'Kept' })).body.data.id;
  for (const profileId of [doomed, kept]) {
    for (const content of ['movie-1', 'series-9/s1e1']) {
      await query(cp, 'insert into profile_watchlist_item (id, profile_id, content_id, created_at) values (gen_random_uuid(), ?, ?, now())', [profileId, content]);
      await query(cp, `insert into profile_progress (id, profile_id, content_id, position_seconds, duration_seconds, updated_at)
                       values (gen_random_uuid(), ?, ?, 1234, 5400, now())`, [profileId, content]);
    }
  }
  const res = await cp.request('DELETE', `/v1/users/me/profiles/${doomed}`, { headers: auth(a) });
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(await countRows(cp, 'profile', 'id = ?', [doomed]), 0);
  t.equal(await countRows(cp, 'profile_watchlist_item', 'profile_id = ?', [doomed]), 0, 'its watchlist is gone');
  t.equal(await countRows(cp, 'profile_progress', 'profile_id = ?', [doomed]), 0, 'its progress is gone');
  t.equal(await countRows(cp, 'profile_watchlist_item', 'profile_id = ?', [kept]), 2, 'another profile\'s data stays');
  t.equal(await countRows(cp, 'profile_progress', 'profile_id = ?', [kept]), 2);
  t.equal((await cp.request('GET', `/v1/users/me/profiles/${doomed}`, { headers: auth(a) })).status, 404);
  t.equal((await cp.request('DELETE', `/v1/users/me/profiles/${doomed}`, { headers: auth(a) })).status, 404, 'a second delete finds nothing');
  t.equal((await create(a, { name: 'Replacement' })).status, 201, 'the freed place can be taken again');
});

t.test('DELETE /v1/users/me/profiles/{id} refuses the primary profile with 409 PRIMARY_PROFILE', async (t) => {
  const a = await createLoggedInUser(cp);
  const [primary] = (await cp.request('GET', '/v1/users/me/profiles', { headers: auth(a) })).body.data;
  const res = await cp.request('DELETE', `/v1/users/me/profiles/${primary.id}`, { headers: auth(a) });
  t.equal(res.status, 409);
  t.equal(res.body.code, 'PRIMARY_PROFILE');
  t.equal(await countRows(cp, 'profile', 'id = ?', [primary.id]), 1);
});

// ---- ownership ----------------------------------------------------------------------------

t.test('profile routes answer 404 for another user\'s profile and change nothing', async (t) => {
  const owner = await userWithLimit(2);
  const other = await createLoggedInUser(cp);
  const id = (await create(owner, { name: 'Mine', pin: '2468' })).body.data.id;
  const before = await profileRow(id);
  for (const [method, json] of [['GET'], ['PUT', { name: 'Stolen', pin: null }], ['DELETE']] as const) {
    const res = await cp.request(method, `/v1/users/me/profiles/${id}`, { headers: auth(other), json });
    t.equal(res.status, 404, method);
    t.equal(res.body.code, 'NOT_FOUND', method);
  }
  t.same(await profileRow(id), before, 'unchanged');
  const listed = await cp.request('GET', '/v1/users/me/profiles', { headers: auth(other) });
  t.notOk(listed.body.data.some((p: { id: string }) => p.id === id), 'not in the other user\'s list');
  t.equal((await cp.request('GET', `/v1/users/me/profiles/${crypto.randomUUID()}`, { headers: auth(owner) })).status, 404, 'an unknown id');
});

// Regression: the guard reported the first matching tier, and an administrator who is also a subscriber (every
// admin:create account is) matched the subscriber's type-scoped grant first, so the bypass never applied.
t.test('an administrator who also holds subscriber acts on another user\'s profile (global bypass), audit-logged, and clears a forgotten PIN', async (t) => {
  const owner = await userWithLimit(2);
  const admin = await createAdmin(cp);
  const id = (await create(owner, { name: 'Locked', pin: '1357' })).body.data.id;
  const read = await cp.request('GET', `/v1/users/me/profiles/${id}`, { headers: auth(admin) });
  t.equal(read.status, 200);
  const cleared = await cp.request('PUT', `/v1/users/me/profiles/${id}`, { headers: auth(admin), json: { name: 'Unlocked', pin: null } });
  t.equal(cleared.status, 200, cleared.text);
  t.match(cleared.body.data, { name: 'Unlocked', pin_protected: false });
  t.equal((await profileRow(id)).pin_hash, null);
  t.equal(await countRows(cp, 'audit_log', `action = 'profile.updated' and resource_id = ? and actor_id = ?`, [id, admin.id]), 1, 'audit-logged with the acting admin');
  t.equal((await cp.request('DELETE', `/v1/users/me/profiles/${id}`, { headers: auth(admin) })).status, 204);
  t.equal(await countRows(cp, 'audit_log', `action = 'profile.deleted' and resource_id = ? and actor_id = ?`, [id, admin.id]), 1);
  const own = await cp.request('GET', '/v1/users/me/profiles', { headers: auth(admin) });
  t.same(own.body.data.map((p: { is_primary: boolean }) => p.is_primary), [true], 'the admin\'s own list holds only the admin\'s profile');
});

// ---- OpenAPI ------------------------------------------------------------------------------

t.test('the OpenAPI document shows the profile operations with their refusals and the profile-token header', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  const collection = doc.paths['/v1/users/me/profiles'];
  const item = doc.paths['/v1/users/me/profiles/{profile_id}'];
  t.ok(collection?.get && collection?.post, 'list and create');
  t.ok(item?.get && item?.put && item?.delete, 'read, update, delete');
  t.ok(doc.paths['/v1/users/me/profiles/{profile_id}/verify-pin']?.post, 'verify-pin');
  t.match(collection.post.responses['409'].description, /PROFILE_LIMIT_REACHED/);
  t.match(item.delete.responses['409'].description, /PRIMARY_PROFILE/);
  t.ok(item.delete.responses['204']);
  t.match(item.put.responses['403'].description, /PROFILE_TOKEN_REQUIRED/);
  t.ok(item.put.parameters.some((p: { name: string; in: string }) => p.name === 'X-Profile-Token' && p.in === 'header'), 'PUT names X-Profile-Token');
  t.ok(item.delete.parameters.some((p: { name: string; in: string }) => p.name === 'X-Profile-Token' && p.in === 'header'), 'DELETE names X-Profile-Token');
  const record = collection.post.responses['201'].content['application/json'].schema.properties.data;
  t.notOk('pin' in record.properties, 'the record has no pin');
  t.ok('pin_protected' in record.properties);
  t.same(collection.post.requestBody.content['application/json'].schema.properties.content_rating_limit.enum,
    ['G', 'PG', 'PG-13', 'R', 'NC-17', 'TV-Y', 'TV-G', 'TV-PG', 'TV-14', 'TV-MA']);
});
