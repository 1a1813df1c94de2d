// Coupons through the real server on PostgreSQL and Redis (document 1 §2,
// §4.5; DESIGN.md §5): administrators create, list, read and deactivate them;
// subscribers validate a code for a plan (every documented error_code); the
// billing engine's redeemCoupon never passes a limit, even with 20 at once.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, createSuperadmin, createUserDirect, login, query, RELAXED_LIMITS, type TestAccount,
} from '../../../test/support/auth.ts';
import { systemContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { couponDiscount, findCoupon, redeemCoupon } from './coupon-service.ts';
import { MoneyError } from './money.ts';

let offsetMs = 0;
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock: { now: () => new Date(Date.now() + offsetMs) } });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
const subscriber = await createLoggedInUser(cp);

const send = (who: TestAccount | null, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: who ? bearer(who.accessToken, headers) : headers, json });

async function createPlan(overrides: Record<string, unknown> = {}): Promise<{ id: string; currency: string }> {
  const res = await send(superadmin, 'POST', '/v1/admin/plans', {
    name: 'Standard', type: 'svod', price: 9.99, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, ...overrides,
  });
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data;
}

let sequence = 0;
const uniqueCode = (prefix = 'SAVE') => `${prefix}${process.pid}X${++sequence}`;

async function createCoupon(json: Record<string, unknown>): Promise<Record<string, any> & { id: string; code: string }> {
  const res = await send(admin, 'POST', '/v1/admin/coupons', { code: uniqueCode(), discount_type: 'percent', discount_value: 10, ...json });
  if (res.status !== 201) throw new Error(`create coupon: ${res.status} ${res.text}`);
  return res.body.data;
}

const couponRow = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_coupon where id = ?', [id]))[0];
const validate = (who: TestAccount, code: string, planId: string) => send(who, 'POST', '/v1/coupons/validate', { code, plan_id: planId });

/** The billing engine's call, in a context of its own (its own unit of work, as a separate request would have). */
const redeem = (code: string, userId: string, planId: string) =>
  redeemCoupon(cp.app, systemContext(cp.app), { code, userId, planId });

/** The error_code a refused redemption carries (undefined when it was not refused). */
const refusal = async (redemption: Promise<unknown>) => ((await redemption.then(() => undefined, (e: unknown) => e)) as ApiError | undefined)?.details?.error_code;

const plan = await createPlan();
const usdPlan = await createPlan({ currency: 'USD', price: 10 });

t.test('POST /v1/admin/coupons creates a percent coupon: 201 with Location and ETag, the code in upper case, defaults, audit-logged with the admin', async (t) => {
  const code = uniqueCode('spring');
  const res = await send(admin, 'POST', '/v1/admin/coupons', { code: code.toLowerCase(), description: 'Spring sale', discount_type: 'percent', discount_value: 12.5 });
  t.equal(res.status, 201, res.text);
  const coupon = res.body.data;
  t.equal(res.headers.get('location'), `/v1/admin/coupons/${coupon.id}`);
  t.ok(res.headers.get('etag'));
  t.match(coupon, {
    code: code.toUpperCase(), description: 'Spring sale', discount_type: 'percent', discount_value: 12.5, currency: null, applicable_plan_ids: [],
    max_redemptions: null, max_redemptions_per_user: 1, redemption_count: 0, valid_until: null, status: 'active',
  });
  t.match(res.text, /"discount_value":12\.5[,}]/, 'a JSON number');
  t.same(Object.keys(coupon).sort(), ['applicable_plan_ids', 'code', 'created_at', 'currency', 'description', 'discount_type', 'discount_value', 'id',
    'max_redemptions', 'max_redemptions_per_user', 'redemption_count', 'status', 'updated_at', 'valid_from', 'valid_until']);
  const row = await couponRow(coupon.id);
  t.equal(row.percent_off_bp, 1250, 'stored in basis points');
  t.equal(await countRows(cp, 'audit_log', `action = 'coupon.created' and resource_id = ? and actor_id = ?`, [coupon.id, admin.id]), 1);
});

t.test('POST /v1/admin/coupons creates amount coupons exactly in minor units, limited to plans, and makes a code when none is given', async (t) => {
  for (const [value, currency, minor] of [[5, 'EUR', 500], [2.5, 'EUR', 250], [0.125, 'KWD', 125], [300, 'JPY', 300]] as const) {
    const coupon = await createCoupon({ discount_type: 'amount', discount_value: value, currency: currency.toLowerCase() });
    t.match(coupon, { discount_type: 'amount', discount_value: value, currency });
    t.equal(Number((await couponRow(coupon.id)).amount_off_minor), minor, `${value} ${currency} → ${minor}`);
  }
  const limited = await createCoupon({ applicable_plan_ids: [plan.id, plan.id], max_redemptions: 100, max_redemptions_per_user: null, valid_until: new Date(Date.now() + offsetMs + 86_400_000).toISOString() });
  t.same(limited.applicable_plan_ids, [plan.id], 'duplicates dropped');
  t.match(limited, { max_redemptions: 100, max_redemptions_per_user: null });
  const generated = await send(admin, 'POST', '/v1/admin/coupons', { discount_type: 'percent', discount_value: 5 });
  t.equal(generated.status, 201);
  t.match(generated.body.data.code, /^[0-9A-HJKMNP-TV-Z]{10}$/, 'ten symbols of Crockford base32');
});

t.test('POST /v1/admin/coupons refuses a code already taken, in any case, with 409 and stores nothing', async (t) => {
  const coupon = await createCoupon({});
  const before = await countRows(cp, 'billing_coupon');
  const res = await send(admin, 'POST', '/v1/admin/coupons', { code: coupon.code.toLowerCase(), discount_type: 'percent', discount_value: 50 });
  t.equal(res.status, 409);
  t.equal(res.body.code, 'CONFLICT');
  t.equal(await countRows(cp, 'billing_coupon'), before);
});

t.test('POST /v1/admin/coupons refuses bad input with 400 naming the field, and stores nothing', async (t) => {
  const before = await countRows(cp, 'billing_coupon');
  const soon = new Date(Date.now() + offsetMs + 3_600_000).toISOString();
  const cases: [Record<string, unknown>, string][] = [
    [{ discount_value: 0 }, 'discount_value'],
    [{ discount_value: -5 }, 'discount_value'],
    [{ discount_value: 100.5 }, 'discount_value'],
    [{ discount_value: 12.345 }, 'discount_value'],
    [{ discount_value: '10' }, 'discount_value'],
    [{ discount_type: 'amount', discount_value: 5 }, 'currency'],
    [{ discount_type: 'amount', discount_value: 9.999, currency: 'EUR' }, 'discount_value'],
    [{ discount_type: 'amount', discount_value: 1.5, currency: 'JPY' }, 'discount_value'],
    [{ discount_type: 'amount', discount_value: 1e12, currency: 'EUR' }, 'discount_value'],
    [{ discount_type: 'free' }, 'discount_type'],
    [{ currency: 'ABC' }, 'currency'],
    [{ code: 'X'.repeat(51) }, 'code'],
    [{ code: 'AB' }, 'code'],
    [{ code: 'two words' }, 'code'],
    [{ code: '-LEADING' }, 'code'],
    [{ description: 'x'.repeat(501) }, 'description'],
    [{ applicable_plan_ids: ['not-a-uuid'] }, 'applicable_plan_ids[0]'],
    [{ applicable_plan_ids: [crypto.randomUUID()] }, 'applicable_plan_ids'],
    [{ applicable_plan_ids: [usdPlan.id], currency: 'EUR' }, 'applicable_plan_ids'],
    [{ max_redemptions: 0 }, 'max_redemptions'],
    [{ max_redemptions: 1.5 }, 'max_redemptions'],
    [{ max_redemptions_per_user: 0 }, 'max_redemptions_per_user'],
    [{ valid_from: soon, valid_until: soon }, 'valid_until'],
    [{ valid_until: new Date(Date.now() + offsetMs - 60_000).toISOString() }, 'valid_until'],
    [{ valid_until: '0000-01-01T00:00:00Z' }, 'valid_until'],
    [{ valid_from: 'tomorrow' }, 'valid_from'],
    [{ redemption_count: 5 }, 'redemption_count'],
    [{ status: 'inactive' }, 'status'],
  ];
  for (const [overrides, field] of cases) {
    const body = { code: uniqueCode(), discount_type: 'percent', discount_value: 10, ...overrides };
    const res = await send(admin, 'POST', '/v1/admin/coupons', body);
    t.equal(res.status, 400, `${field}: ${JSON.stringify(overrides)} → 400 (${res.status} ${res.text.slice(0, 200)})`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await countRows(cp, 'billing_coupon'), before, 'nothing stored');
});

t.test('coupon administration needs an administrator: a subscriber gets 403, anonymous 401, and nothing changes', async (t) => {
  const coupon = await createCoupon({});
  const before = await couponRow(coupon.id);
  const count = await countRows(cp, 'billing_coupon');
  for (const who of [subscriber, null]) {
    const expected = who ? 403 : 401;
    t.equal((await send(who, 'GET', '/v1/admin/coupons')).status, expected);
    t.equal((await send(who, 'POST', '/v1/admin/coupons', { discount_type: 'percent', discount_value: 99 })).status, expected);
    t.equal((await send(who, 'GET', `/v1/admin/coupons/${coupon.id}`)).status, expected);
    t.equal((await send(who, 'DELETE', `/v1/admin/coupons/${coupon.id}`)).status, expected);
  }
  t.same(await couponRow(coupon.id), before);
  t.equal(await countRows(cp, 'billing_coupon'), count);
  t.equal((await send(superadmin, 'GET', `/v1/admin/coupons/${coupon.id}`)).status, 200, 'a superadmin may too');
});

t.test('GET /v1/admin/coupons lists newest first, filtered by status and by the start of the code in any case', async (t) => {
  const prefix = `LST${process.pid}_`;
  const a = await createCoupon({ code: `${prefix}A` });
  const b = await createCoupon({ code: `${prefix}B`, valid_until: new Date(Date.now() + offsetMs + 3_600_000).toISOString() });
  const c = await createCoupon({ code: `${prefix}C` });
  await createCoupon({ code: `LST${process.pid}XD` }); // `_` in the prefix is a literal, not a LIKE wildcard
  t.equal((await send(admin, 'DELETE', `/v1/admin/coupons/${c.id}`)).status, 200);
  const all = await send(admin, 'GET', `/v1/admin/coupons?code=${prefix.toLowerCase()}`);
  t.equal(all.status, 200);
  t.same(all.body.data.map((x: { id: string }) => x.id), [c.id, b.id, a.id]);
  t.same(all.body.data.map((x: { status: string }) => x.status), ['inactive', 'active', 'active']);
  const inactive = await send(admin, 'GET', `/v1/admin/coupons?code=${prefix}&status=inactive`);
  t.same(inactive.body.data.map((x: { id: string }) => x.id), [c.id]);
  const active = await send(admin, 'GET', `/v1/admin/coupons?code=${prefix}&status=active&limit=1`);
  t.same(active.body.data.map((x: { id: string }) => x.id), [b.id]);
  const next = await send(admin, 'GET', `/v1/admin/coupons?code=${prefix}&status=active&limit=1&cursor=${active.body.meta.next_cursor}`);
  t.same(next.body.data.map((x: { id: string }) => x.id), [a.id]);
  const byCode = await send(admin, 'GET', `/v1/admin/coupons?code=${prefix}&sort=code`);
  t.same(byCode.body.data.map((x: { id: string }) => x.id), [a.id, b.id, c.id]);
  for (const bad of ['status=gone', 'code=50%25', 'code=a%20b', 'sort=-discount_value', 'plan_id=x']) {
    t.equal((await send(admin, 'GET', `/v1/admin/coupons?${bad}`)).status, 400, `${bad} → 400`);
  }
});

t.test('GET /v1/admin/coupons/{coupon_id} reads a coupon with its ETag; unknown 404, malformed 400', async (t) => {
  const coupon = await createCoupon({});
  const res = await send(admin, 'GET', `/v1/admin/coupons/${coupon.id}`);
  t.equal(res.status, 200);
  t.same(res.body.data, coupon);
  t.equal((await send(admin, 'GET', `/v1/admin/coupons/${coupon.id}`, undefined, { 'if-none-match': res.headers.get('etag')! })).status, 304);
  t.equal((await send(admin, 'GET', `/v1/admin/coupons/${crypto.randomUUID()}`)).status, 404);
  t.equal((await send(admin, 'GET', '/v1/admin/coupons/SAVE10')).status, 400);
});

t.test('DELETE /v1/admin/coupons/{coupon_id} deactivates: status inactive, validation says inactive, audit-logged once', async (t) => {
  const coupon = await createCoupon({});
  const res = await send(admin, 'DELETE', `/v1/admin/coupons/${coupon.id}`);
  t.equal(res.status, 200);
  t.equal(res.body.data.status, 'inactive');
  t.equal((await couponRow(coupon.id)).status, 'inactive');
  const check = await validate(subscriber, coupon.code, plan.id);
  t.match(check.body, { valid: false, error_code: 'inactive', coupon: { id: coupon.id, status: 'inactive' } });
  t.equal((await send(admin, 'DELETE', `/v1/admin/coupons/${coupon.id}`)).status, 200, 'again: unchanged');
  t.equal(await countRows(cp, 'audit_log', `action = 'coupon.deactivated' and resource_id = ? and actor_id = ?`, [coupon.id, admin.id]), 1);
  t.equal((await send(admin, 'DELETE', `/v1/admin/coupons/${crypto.randomUUID()}`)).status, 404);
});

t.test('POST /v1/coupons/validate answers bare {valid, coupon, error_code} for a usable code, in any case', async (t) => {
  const coupon = await createCoupon({ applicable_plan_ids: [plan.id], currency: 'EUR' });
  const res = await validate(subscriber, ` ${coupon.code.toLowerCase()} `, plan.id);
  t.equal(res.status, 200);
  t.same(Object.keys(res.body).sort(), ['coupon', 'error_code', 'valid'], 'bare, not wrapped in data');
  t.match(res.body, { valid: true, error_code: null, coupon: { id: coupon.id, code: coupon.code, discount_value: 10 } });
  t.equal((await couponRow(coupon.id)).redemption_count, 0, 'validation redeems nothing');
});

t.test('POST /v1/coupons/validate gives each documented error_code', async (t) => {
  const user = await createLoggedInUser(cp);
  const expect = async (code: string, planId: string, errorCode: string, what: string) => {
    const res = await validate(user, code, planId);
    t.equal(res.status, 200, what);
    t.match(res.body, { valid: false, error_code: errorCode }, what);
    return res.body;
  };
  const unknown = await expect('NO-SUCH-CODE', plan.id, 'not_found', 'an unknown code');
  t.equal(unknown.coupon, null, 'no coupon for an unknown code');
  await expect('not a code at all!', plan.id, 'not_found', 'text that cannot be a code');
  const later = await createCoupon({ valid_from: new Date(Date.now() + offsetMs + 86_400_000).toISOString() });
  await expect(later.code, plan.id, 'not_yet_valid', 'valid_from ahead');
  const retired = await createPlan({ is_active: false });
  const any = await createCoupon({});
  await expect(any.code, retired.id, 'plan_inactive', 'a plan no longer on sale');
  const other = await createPlan();
  const limited = await createCoupon({ applicable_plan_ids: [plan.id] });
  await expect(limited.code, other.id, 'not_applicable_to_plan', 'a plan the coupon is not for');
  const dollars = await createCoupon({ discount_type: 'amount', discount_value: 2, currency: 'USD' });
  await expect(dollars.code, plan.id, 'currency_mismatch', 'a USD coupon on a EUR plan');
  const percentInUsd = await createCoupon({ currency: 'USD' });
  await expect(percentInUsd.code, plan.id, 'currency_mismatch', 'a percent coupon limited to USD plans');
  t.match((await validate(user, dollars.code, usdPlan.id)).body, { valid: true });

  const once = await createCoupon({ max_redemptions: 1, max_redemptions_per_user: null });
  await redeem(once.code, (await createUserDirect(cp)).id, plan.id);
  const exhausted = await expect(once.code, plan.id, 'max_redemptions_reached', 'redeemed max_redemptions times');
  t.equal(exhausted.coupon.redemption_count, 1);
  const perUser = await createCoupon({ max_redemptions_per_user: 2 });
  await redeem(perUser.code, user.id, plan.id);
  t.match((await validate(user, perUser.code, plan.id)).body, { valid: true }, 'one of two used');
  await redeem(perUser.code, user.id, plan.id);
  await expect(perUser.code, plan.id, 'max_per_user_reached', 'the caller used both');
  t.match((await validate(subscriber, perUser.code, plan.id)).body, { valid: true }, 'another user still may');
});

t.test('POST /v1/coupons/validate refuses bad input with 400, an unknown plan with 404, and anonymous callers with 401', async (t) => {
  const coupon = await createCoupon({});
  for (const body of [{ code: 'X'.repeat(51), plan_id: plan.id }, { code: '', plan_id: plan.id }, { code: coupon.code }, { code: coupon.code, plan_id: 'basic' },
    { code: coupon.code, plan_id: plan.id, user_id: admin.id }, { code: 7, plan_id: plan.id }]) {
    const res = await send(subscriber, 'POST', '/v1/coupons/validate', body);
    t.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
  }
  const res = await validate(subscriber, coupon.code, crypto.randomUUID());
  t.equal(res.status, 404);
  t.equal((await send(null, 'POST', '/v1/coupons/validate', { code: coupon.code, plan_id: plan.id })).status, 401);
});

t.test('POST /v1/coupons/validate is rate-limited per caller against code guessing (429 with Retry-After)', async (t) => {
  const user = await createLoggedInUser(cp);
  for (let i = 0; i < 30; i++) {
    const res = await validate(user, `GUESS${i}X`, plan.id);
    if (res.status !== 200) t.fail(`check ${i + 1}: ${res.status}`);
  }
  const limited = await validate(user, 'GUESS30X', plan.id);
  t.equal(limited.status, 429);
  t.equal(limited.body.code, 'RATE_LIMITED');
  t.ok(Number(limited.headers.get('retry-after')) > 0);
  t.equal((await validate(subscriber, 'GUESS31X', plan.id)).status, 200, 'another caller has a budget of their own');
});

t.test('redeemCoupon counts and records a redemption, and refuses an unusable coupon with 400 carrying error_code, storing nothing', async (t) => {
  const coupon = await createCoupon({ max_redemptions: 5, max_redemptions_per_user: 1 });
  const user = await createUserDirect(cp);
  const { redemption } = await redeem(coupon.code.toLowerCase(), user.id, plan.id);
  t.equal((await couponRow(coupon.id)).redemption_count, 1);
  const [row] = await query<{ user_id: string; plan_id: string; coupon_id: string }>(cp, 'select coupon_id, user_id, plan_id from billing_coupon_redemption where id = ?', [redemption.id]);
  t.same(row, { coupon_id: coupon.id, user_id: user.id, plan_id: plan.id });
  const error = await redeem(coupon.code, user.id, plan.id).catch((e: unknown) => e);
  t.ok(error instanceof ApiError, 'refused');
  t.match(error, { code: 'VALIDATION_ERROR', status: 400, details: { error_code: 'max_per_user_reached' }, errors: [{ field: 'coupon_code' }] });
  t.equal((await couponRow(coupon.id)).redemption_count, 1, 'nothing counted');
  t.equal(await countRows(cp, 'billing_coupon_redemption', 'coupon_id = ?', [coupon.id]), 1, 'nothing recorded');
  t.equal(await refusal(redeem('NOPE-NOPE', user.id, plan.id)), 'not_found');
});

t.test('race: 20 concurrent redemptions of a coupon with one redemption left give exactly one', async (t) => {
  const coupon = await createCoupon({ max_redemptions: 3, max_redemptions_per_user: null });
  await redeem(coupon.code, (await createUserDirect(cp)).id, plan.id);
  await redeem(coupon.code, (await createUserDirect(cp)).id, plan.id);
  const users = await Promise.all(Array.from({ length: 20 }, () => createUserDirect(cp)));
  const results = await Promise.allSettled(users.map((u) => redeem(coupon.code, u.id, plan.id)));
  const won = results.filter((r) => r.status === 'fulfilled');
  const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  t.equal(won.length, 1, 'one redemption');
  t.equal(refused.length, 19);
  t.ok(refused.every((r) => r.reason instanceof ApiError && r.reason.details?.error_code === 'max_redemptions_reached'), 'the others: max_redemptions_reached');
  t.equal((await couponRow(coupon.id)).redemption_count, 3, 'the count stops at max_redemptions');
  t.equal(await countRows(cp, 'billing_coupon_redemption', 'coupon_id = ?', [coupon.id]), 3);
});

t.test('race: 20 concurrent redemptions by one user of a once-per-user coupon give exactly one', async (t) => {
  const coupon = await createCoupon({ max_redemptions: null, max_redemptions_per_user: 1 });
  const user = await createUserDirect(cp);
  const results = await Promise.allSettled(Array.from({ length: 20 }, () => redeem(coupon.code, user.id, plan.id)));
  t.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
  t.ok(results.every((r) => r.status === 'fulfilled' || (r.reason as ApiError).details?.error_code === 'max_per_user_reached'));
  t.equal(await countRows(cp, 'billing_coupon_redemption', 'coupon_id = ? and user_id = ?', [coupon.id, user.id]), 1);
  t.equal((await couponRow(coupon.id)).redemption_count, 1);
});

t.test('the database refuses a redemption count beyond max_redemptions, whatever the code does', async (t) => {
  const coupon = await createCoupon({ max_redemptions: 1, max_redemptions_per_user: null });
  await t.rejects(query(cp, 'update billing_coupon set redemption_count = 2 where id = ?', [coupon.id]), /billing_coupon_redemptions_check/);
});

t.test('couponDiscount: a percentage rounded half up, a fixed amount never above the price', async (t) => {
  const em = cp.database.db.orm.em.fork();
  const percent = await findCoupon(em, (await createCoupon({ discount_value: 15 })).id);
  t.equal(couponDiscount(percent, 999, 'EUR'), 150, '15 % of 9.99 = 1.4985 → 1.50');
  t.equal(couponDiscount(percent, 500, 'JPY'), 75);
  const amount = await findCoupon(em, (await createCoupon({ discount_type: 'amount', discount_value: 5, currency: 'EUR' })).id);
  t.equal(couponDiscount(amount, 999, 'EUR'), 500);
  t.equal(couponDiscount(amount, 300, 'EUR'), 300, 'never more than the amount');
  t.throws(() => couponDiscount(amount, 999, 'USD'), MoneyError);
});

t.test('POST /v1/coupons/validate says expired once valid_until has passed', async (t) => {
  const coupon = await createCoupon({ valid_until: new Date(Date.now() + offsetMs + 3_600_000).toISOString() });
  const user = await createUserDirect(cp);
  offsetMs += 2 * 3_600_000; // two hours later (tokens issued before are expired now: log in again)
  const later = { ...user, ...(await login(cp, user.email, user.password)) } as TestAccount;
  const res = await validate(later, coupon.code, plan.id);
  t.match(res.body, { valid: false, error_code: 'expired', coupon: { status: 'expired' } });
  const relogged = { ...admin, ...(await login(cp, admin.email, admin.password)) } as TestAccount;
  const expired = await send(relogged, 'GET', `/v1/admin/coupons?status=expired&code=${coupon.code}`);
  t.same(expired.body.data.map((c: { id: string }) => c.id), [coupon.id], 'listed as expired');
  t.equal(await refusal(redeem(coupon.code, user.id, plan.id)), 'expired', 'and cannot be redeemed');
});

t.test('the OpenAPI document shows the coupon operations and the error_code values', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/coupons/validate']?.post);
  t.ok(doc.paths['/v1/admin/coupons']?.get && doc.paths['/v1/admin/coupons']?.post);
  t.ok(doc.paths['/v1/admin/coupons/{coupon_id}']?.get && doc.paths['/v1/admin/coupons/{coupon_id}']?.delete);
  const schema = doc.paths['/v1/coupons/validate'].post.responses['200'].content['application/json'].schema;
  t.same(schema.properties.error_code.anyOf?.find((s: { enum?: string[] }) => s.enum)?.enum ?? schema.properties.error_code.enum, [
    'not_found', 'inactive', 'expired', 'not_yet_valid', 'plan_inactive', 'not_applicable_to_plan', 'currency_mismatch', 'max_redemptions_reached', 'max_per_user_reached',
  ]);
  t.match(doc.paths['/v1/admin/coupons'].post.responses['409'].description, /CONFLICT/);
});
