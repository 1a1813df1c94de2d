// Plans through the real server on PostgreSQL and Redis (document 1 §2, §3,
// §4.7; DESIGN.md §5): superadmin-only administration, prices as exact JSON
// numbers, If-Match, grandfathering, deactivation, the hard delete, and the
// public list of active plans.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, createAdmin, createLoggedInUser, createSuperadmin, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
const subscriber = await createLoggedInUser(cp);

const send = (who: TestAccount | null, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: who ? bearer(who.accessToken, headers) : headers, json });

let sequence = 0;
/** A valid create body; `overrides` replace fields (undefined removes one). */
function planBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  sequence += 1;
  const body: Record<string, unknown> = {
    name: `Standard ${sequence}`, type: 'svod', description: 'HD on two screens', price: 9.99, currency: 'EUR', billing_cycle: 'monthly',
    max_profiles: 4, max_concurrent_streams: 2, max_devices: 5, max_quality: 'HD', has_downloads: true, allow_download_count: 10,
    has_ads: false, is_active: true,
  };
  for (const [key, value] of Object.entries(overrides)) {
    if (value === undefined) delete body[key];
    else body[key] = value;
  }
  return body;
}

async function createPlan(overrides: Record<string, unknown> = {}) {
  const res = await send(superadmin, 'POST', '/v1/admin/plans', planBody(overrides));
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data as Record<string, any> & { id: string };
}

const planRow = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_plan where id = ?', [id]))[0];

/** A subscription inserted straight into the database (the subscription engine comes in the next slice). */
async function insertSubscription(userId: string, planId: string, status = 'active'): Promise<string> {
  const id = crypto.randomUUID();
  await query(cp, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams,
    max_devices, current_period_start, current_period_end, created_at, updated_at)
    values (?, ?, ?, 'svod', ?, 999, 'EUR', 'monthly', 4, 2, 5, now(), now() + interval '1 month', now(), now())`, [id, userId, planId, status]);
  return id;
}

t.test('POST /v1/admin/plans creates a plan: 201 with Location and ETag, the price exact in minor units, defaults applied, audit-logged', async (t) => {
  const res = await send(superadmin, 'POST', '/v1/admin/plans', planBody({ name: '  Premium  ', description: undefined }));
  t.equal(res.status, 201, res.text);
  const plan = res.body.data;
  t.equal(res.headers.get('location'), `/v1/admin/plans/${plan.id}`);
  t.ok(res.headers.get('etag'), 'a versioned record');
  t.match(plan, {
    name: 'Premium', type: 'svod', description: null, price: 9.99, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: true, allow_download_count: 10, has_ads: false, has_hdr: false, has_dolby_atmos: false, trial_days: 0, is_active: true,
  });
  t.match(res.text, /"price":9\.99[,}]/, 'the price is a JSON number');
  t.same(Object.keys(plan).sort(), ['allow_download_count', 'billing_cycle', 'created_at', 'currency', 'description', 'has_ads', 'has_dolby_atmos', 'has_downloads',
    'has_hdr', 'id', 'is_active', 'max_concurrent_streams', 'max_devices', 'max_profiles', 'max_quality', 'name', 'price', 'trial_days', 'type', 'updated_at']);
  const row = await planRow(plan.id);
  t.equal(Number(row.price_minor), 999, 'stored as 999 cents');
  const [audit] = await query<{ actor_id: string; metadata: { changes: Record<string, { to: unknown }> } }>(cp,
    `select actor_id, metadata from audit_log where action = 'plan.created' and resource_id = ?`, [plan.id]);
  t.equal(audit?.actor_id, superadmin.id, 'audit-logged with the acting superadmin');
  t.equal(audit?.metadata.changes.price_minor?.to, 999);
});

t.test('POST /v1/admin/plans takes prices exactly in each currency\'s minor unit (EUR 2, JPY 0, KWD 3 decimals)', async (t) => {
  const cases: [number, string, number][] = [
    [500, 'JPY', 500], [1.125, 'KWD', 1125], [0.1, 'EUR', 10], [0, 'EUR', 0], [19.9, 'usd', 1990], [1234567.89, 'EUR', 123456789], [9999999999.99, 'EUR', 999999999999],
    [0.3, 'EUR', 30], [1.005, 'KWD', 1005], [99.99, 'GBP', 9999],
  ];
  for (const [price, currency, minor] of cases) {
    const plan = await createPlan({ price, currency });
    t.equal(plan.price, price, `${price} ${currency} reads back as the same JSON number`);
    t.equal(plan.currency, currency.toUpperCase());
    t.equal(Number((await planRow(plan.id)).price_minor), minor, `${price} ${currency} → ${minor} minor units`);
  }
});

t.test('POST /v1/admin/plans refuses bad input with 400 naming the field, and stores nothing', async (t) => {
  const before = await countRows(cp, 'billing_plan');
  const cases: [Record<string, unknown>, string][] = [
    [planBody({ price: 9.999 }), 'price'],
    [planBody({ price: 1.5, currency: 'JPY' }), 'price'],
    [planBody({ price: 1.0001, currency: 'KWD' }), 'price'],
    [planBody({ price: -1 }), 'price'],
    [planBody({ price: 1e13 }), 'price'],
    [planBody({ price: 10000000000 }), 'price'],
    [planBody({ price: '9.99' }), 'price'],
    [planBody({ price: undefined }), 'price'],
    [planBody({ currency: 'ABC' }), 'currency'],
    [planBody({ currency: 'EURO' }), 'currency'],
    [planBody({ currency: 'XAU' }), 'currency'],
    [planBody({ name: undefined }), 'name'],
    [planBody({ name: 'x'.repeat(101) }), 'name'],
    [planBody({ name: 'Two\nlines' }), 'name'],
    [planBody({ description: 'x'.repeat(501) }), 'description'],
    [planBody({ type: 'cable' }), 'type'],
    [planBody({ billing_cycle: 'weekly' }), 'billing_cycle'],
    [planBody({ max_profiles: 0 }), 'max_profiles'],
    [planBody({ max_profiles: 7 }), 'max_profiles'],
    [planBody({ max_concurrent_streams: 9 }), 'max_concurrent_streams'],
    [planBody({ max_devices: 21 }), 'max_devices'],
    [planBody({ max_devices: 2.5 }), 'max_devices'],
    [planBody({ max_quality: '4K' }), 'max_quality'],
    [planBody({ trial_days: -1 }), 'trial_days'],
    [planBody({ trial_days: 366 }), 'trial_days'],
    [planBody({ has_downloads: false, allow_download_count: 3 }), 'allow_download_count'],
    [planBody({ allow_download_count: -1 }), 'allow_download_count'],
    [planBody({ is_active: undefined }), 'is_active'],
    [planBody({ has_ads: 'no' }), 'has_ads'],
    [planBody({ price_minor: 999 }), 'price_minor'],
    [planBody({ id: crypto.randomUUID() }), 'id'],
  ];
  for (const [body, field] of cases) {
    const res = await send(superadmin, 'POST', '/v1/admin/plans', body);
    t.equal(res.status, 400, `${field}: ${JSON.stringify(body[field])} → 400`);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await countRows(cp, 'billing_plan'), before, 'nothing stored');
});

t.test('plan administration is superadmin only: an admin and a subscriber get 403, anonymous 401, and nothing changes', async (t) => {
  const plan = await createPlan();
  const before = await planRow(plan.id);
  const count = await countRows(cp, 'billing_plan');
  for (const who of [admin, subscriber, null]) {
    const expected = who ? 403 : 401;
    const label = who === admin ? 'admin' : who ? 'subscriber' : 'anonymous';
    t.equal((await send(who, 'GET', '/v1/admin/plans')).status, expected, `${label}: list`);
    t.equal((await send(who, 'POST', '/v1/admin/plans', planBody())).status, expected, `${label}: create`);
    t.equal((await send(who, 'GET', `/v1/admin/plans/${plan.id}`)).status, expected, `${label}: read`);
    t.equal((await send(who, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ price: 1 }))).status, expected, `${label}: update`);
    t.equal((await send(who, 'DELETE', `/v1/admin/plans/${plan.id}`)).status, expected, `${label}: deactivate`);
    t.equal((await send(who, 'DELETE', `/v1/admin/plans/${plan.id}?hard=true`)).status, expected, `${label}: hard delete`);
  }
  t.same(await planRow(plan.id), before, 'the plan is unchanged');
  t.equal(await countRows(cp, 'billing_plan'), count, 'no plan created');
});

t.test('GET /v1/admin/plans lists inactive plans too, newest first, with filters and cursors', async (t) => {
  const live = await createPlan({ type: 'live', currency: 'SEK', price: 99 });
  const retired = await createPlan({ type: 'live', currency: 'SEK', price: 79, is_active: false });
  const all = await send(superadmin, 'GET', '/v1/admin/plans?currency=sek&limit=100');
  t.equal(all.status, 200);
  t.same(all.body.data.map((p: { id: string }) => p.id), [retired.id, live.id], 'newest first, inactive included');
  t.equal(all.body.meta.total, 2);
  const inactive = await send(superadmin, 'GET', '/v1/admin/plans?currency=SEK&is_active=false');
  t.same(inactive.body.data.map((p: { id: string }) => p.id), [retired.id]);
  const first = await send(superadmin, 'GET', '/v1/admin/plans?type=live&currency=SEK&limit=1');
  t.same(first.body.data.map((p: { id: string }) => p.id), [retired.id]);
  t.equal(first.body.meta.has_more, true);
  const second = await send(superadmin, 'GET', `/v1/admin/plans?type=live&currency=SEK&limit=1&cursor=${first.body.meta.next_cursor}`);
  t.same(second.body.data.map((p: { id: string }) => p.id), [live.id]);
  const cheapest = await send(superadmin, 'GET', '/v1/admin/plans?currency=SEK&sort=price');
  t.same(cheapest.body.data.map((p: { price: number }) => p.price), [79, 99], 'sort=price pages over the price');
  for (const bad of ['is_active=maybe', 'type=cable', 'currency=ABC', 'sort=price_minor', 'status=active', 'limit=0']) {
    const res = await send(superadmin, 'GET', `/v1/admin/plans?${bad}`);
    t.equal(res.status, 400, `${bad} → 400`);
  }
});

t.test('GET /v1/admin/plans/{plan_id} reads a plan with its ETag; an unknown id is 404, a malformed one 400', async (t) => {
  const plan = await createPlan({ is_active: false });
  const res = await send(superadmin, 'GET', `/v1/admin/plans/${plan.id}`);
  t.equal(res.status, 200);
  t.same(res.body.data, plan);
  const etag = res.headers.get('etag')!;
  t.equal((await send(superadmin, 'GET', `/v1/admin/plans/${plan.id}`, undefined, { 'if-none-match': etag })).status, 304);
  t.equal((await send(superadmin, 'GET', `/v1/admin/plans/${crypto.randomUUID()}`)).status, 404);
  t.equal((await send(superadmin, 'GET', '/v1/admin/plans/not-a-uuid')).status, 400);
});

t.test('PUT /v1/admin/plans/{plan_id} replaces the plan\'s fields; optional ones left out keep their values; audit-logged with the changes', async (t) => {
  const plan = await createPlan({ has_hdr: true, trial_days: 14, description: 'Keep me' });
  const res = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ name: 'Standard Plus', price: 12.49, max_profiles: 5, description: undefined }));
  t.equal(res.status, 200, res.text);
  t.match(res.body.data, { name: 'Standard Plus', price: 12.49, max_profiles: 5, has_hdr: true, trial_days: 14, description: 'Keep me' });
  t.not(res.headers.get('etag'), null);
  t.equal(Number((await planRow(plan.id)).price_minor), 1249);
  const [audit] = await query<{ actor_id: string; metadata: { changes: Record<string, { from: unknown; to: unknown }> } }>(cp,
    `select actor_id, metadata from audit_log where action = 'plan.updated' and resource_id = ?`, [plan.id]);
  t.equal(audit?.actor_id, superadmin.id);
  t.same(audit?.metadata.changes, { name: { from: plan.name, to: 'Standard Plus' }, price_minor: { from: 999, to: 1249 }, max_profiles: { from: 4, to: 5 } });

  const cleared = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ description: null, has_downloads: false, allow_download_count: undefined }));
  t.equal(cleared.status, 200);
  t.match(cleared.body.data, { description: null, has_downloads: false, allow_download_count: null }, 'null clears; no downloads clears the count');
});

t.test('PUT /v1/admin/plans/{plan_id} with a stale If-Match is 412 and changes nothing; with the current one it applies', async (t) => {
  const plan = await createPlan();
  const read = await send(superadmin, 'GET', `/v1/admin/plans/${plan.id}`);
  const etag = read.headers.get('etag')!;
  const first = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ price: 10.99 }), { 'if-match': etag });
  t.equal(first.status, 200);
  const before = await planRow(plan.id);
  const stale = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ price: 11.99 }), { 'if-match': etag });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  t.same(await planRow(plan.id), before, 'nothing changed');
  const fresh = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ price: 11.99 }), { 'if-match': first.headers.get('etag')! });
  t.equal(fresh.status, 200);
  t.equal(fresh.body.data.price, 11.99);
});

t.test('PUT /v1/admin/plans/{plan_id} refuses bad input with 400 and an unknown plan with 404, changing nothing', async (t) => {
  const plan = await createPlan();
  const before = await planRow(plan.id);
  for (const body of [planBody({ price: 9.991 }), planBody({ max_devices: 0 }), planBody({ name: undefined }), planBody({ extra: 1 }), planBody({ currency: 'JPY', price: 9.99 })]) {
    const res = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, body);
    t.equal(res.status, 400, JSON.stringify(res.body.errors));
  }
  t.same(await planRow(plan.id), before);
  t.equal((await send(superadmin, 'PUT', `/v1/admin/plans/${crypto.randomUUID()}`, planBody())).status, 404);
});

t.test('PUT /v1/admin/plans/{plan_id} leaves existing subscriptions on the terms they were sold with (grandfathering)', async (t) => {
  const plan = await createPlan();
  const user = await createLoggedInUser(cp);
  const subscriptionId = await insertSubscription(user.id, plan.id);
  const before = await query(cp, 'select * from billing_subscription where id = ?', [subscriptionId]);
  const res = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({
    price: 14.99, currency: 'USD', billing_cycle: 'annual', max_profiles: 6, max_concurrent_streams: 4, max_devices: 10, max_quality: 'UHD_4K',
  }));
  t.equal(res.status, 200);
  t.same(await query(cp, 'select * from billing_subscription where id = ?', [subscriptionId]), before, 'the subscription row is untouched: 9.99 EUR monthly, 4 profiles');
  const profiles = await cp.app.profileLimit(cp.database.db.orm.em.fork() as never, user.id);
  t.equal(profiles, 4, 'the profile limit still comes from the terms sold');
});

t.test('PUT /v1/admin/plans/{plan_id} refuses a change of type while subscriptions refer to the plan (409 PLAN_HAS_SUBSCRIBERS)', async (t) => {
  const plan = await createPlan();
  const user = await createLoggedInUser(cp);
  await insertSubscription(user.id, plan.id, 'canceled');
  const before = await planRow(plan.id);
  const res = await send(superadmin, 'PUT', `/v1/admin/plans/${plan.id}`, planBody({ type: 'live' }));
  t.equal(res.status, 409);
  t.equal(res.body.code, 'PLAN_HAS_SUBSCRIBERS');
  t.same(await planRow(plan.id), before);
  const unused = await createPlan();
  const changed = await send(superadmin, 'PUT', `/v1/admin/plans/${unused.id}`, planBody({ type: 'live' }));
  t.equal(changed.status, 200, 'a plan without subscriptions may change type');
  t.equal(changed.body.data.type, 'live');
});

t.test('DELETE /v1/admin/plans/{plan_id} deactivates: the plan with is_active false, subscriptions continue, the public list drops it, audit-logged once', async (t) => {
  const plan = await createPlan({ currency: 'NOK', price: 109 });
  const user = await createLoggedInUser(cp);
  const subscriptionId = await insertSubscription(user.id, plan.id);
  t.same((await send(null, 'GET', '/v1/plans?currency=NOK')).body.data.map((p: { id: string }) => p.id), [plan.id]);
  const res = await send(superadmin, 'DELETE', `/v1/admin/plans/${plan.id}`);
  t.equal(res.status, 200, res.text);
  t.equal(res.body.data.is_active, false);
  t.equal(res.body.data.id, plan.id);
  t.ok(res.headers.get('etag'));
  t.equal((await planRow(plan.id)).is_active, false);
  const [subscription] = await query<{ status: string }>(cp, 'select status from billing_subscription where id = ?', [subscriptionId]);
  t.equal(subscription?.status, 'active', 'the existing subscription continues');
  t.same((await send(null, 'GET', '/v1/plans?currency=NOK')).body.data, [], 'no longer on sale');
  t.equal((await send(superadmin, 'GET', `/v1/admin/plans/${plan.id}`)).body.data.is_active, false, 'still readable by the superadmin');
  const again = await send(superadmin, 'DELETE', `/v1/admin/plans/${plan.id}`);
  t.equal(again.status, 200, 'deactivating an inactive plan answers it unchanged');
  t.equal(await countRows(cp, 'audit_log', `action = 'plan.deactivated' and resource_id = ? and actor_id = ?`, [plan.id, superadmin.id]), 1);
  t.equal((await send(superadmin, 'DELETE', `/v1/admin/plans/${crypto.randomUUID()}`)).status, 404);
});

t.test('DELETE /v1/admin/plans/{plan_id}?hard=true refuses a plan with subscribers, live or ended (409 PLAN_HAS_SUBSCRIBERS), and deletes one without', async (t) => {
  for (const status of ['active', 'canceled']) {
    const plan = await createPlan();
    const user = await createLoggedInUser(cp);
    await insertSubscription(user.id, plan.id, status);
    const before = await planRow(plan.id);
    const res = await send(superadmin, 'DELETE', `/v1/admin/plans/${plan.id}?hard=true`);
    t.equal(res.status, 409, `${status} subscription`);
    t.equal(res.body.code, 'PLAN_HAS_SUBSCRIBERS');
    t.same(await planRow(plan.id), before, 'the plan is kept unchanged');
  }
  const plan = await createPlan();
  const res = await send(superadmin, 'DELETE', `/v1/admin/plans/${plan.id}?hard=true`);
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(await countRows(cp, 'billing_plan', 'id = ?', [plan.id]), 0);
  t.equal(await countRows(cp, 'audit_log', `action = 'plan.deleted' and resource_id = ? and actor_id = ?`, [plan.id, superadmin.id]), 1);
  t.equal((await send(superadmin, 'DELETE', `/v1/admin/plans/${plan.id}?hard=yes`)).status, 400);
});

t.test('GET /v1/plans lists the active plans to anyone, cheapest first, with filters', async (t) => {
  const cheap = await createPlan({ currency: 'CHF', price: 7.5, type: 'addon' });
  const dear = await createPlan({ currency: 'CHF', price: 15 });
  await createPlan({ currency: 'CHF', price: 1, is_active: false });
  const res = await send(null, 'GET', '/v1/plans?currency=CHF');
  t.equal(res.status, 200);
  t.same(res.body.data.map((p: { id: string }) => p.id), [cheap.id, dear.id], 'active only, by price');
  t.same(res.body.data.map((p: { price: number }) => p.price), [7.5, 15]);
  t.match(res.body.meta, { total: 2, count: 2, has_more: false });
  const addons = await send(subscriber, 'GET', '/v1/plans?currency=CHF&type=addon');
  t.same(addons.body.data.map((p: { id: string }) => p.id), [cheap.id], 'a signed-in caller sees the same');
  for (const bad of ['currency=francs', 'type=cable', 'is_active=false', 'limit=101', 'sort=-secret']) {
    t.equal((await send(null, 'GET', `/v1/plans?${bad}`)).status, 400, `${bad} → 400`);
  }
});

t.test('the OpenAPI document shows the plan operations', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/plans']?.get, 'public list');
  const collection = doc.paths['/v1/admin/plans'];
  const item = doc.paths['/v1/admin/plans/{plan_id}'];
  t.ok(collection?.get && collection?.post, 'admin list and create');
  t.ok(item?.get && item?.put && item?.delete, 'read, update, deactivate');
  t.match(item.delete.responses['409'].description, /PLAN_HAS_SUBSCRIBERS/);
  t.ok(item.delete.responses['200'] && item.delete.responses['204']);
  t.ok(item.put.responses['412'], 'If-Match');
  t.equal(collection.post.requestBody.content['application/json'].schema.properties.price.type, 'number');
});
