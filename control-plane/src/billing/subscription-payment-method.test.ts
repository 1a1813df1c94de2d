// Which card a subscription is billed to, through the real server, PostgreSQL
// and the billing clock (issue 20, item 3): a subscription follows the
// account's default unless a card was chosen for it (PATCH
// /v1/subscriptions/{id}); a new default, or a card chosen, retries an open
// renewal invoice at once, from decline to recovery.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, createAdmin, createSuperadmin, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { attachCard, createTestPlan, relogin, subscribeWithCard, subscriberWithCard, type Subscriber } from '../../../test/support/billing.ts';
import { DAY, ManualClock, MINUTE } from '../core/clock.ts';

const clock = new ManualClock(Date.parse('2026-07-01T09:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
const send = (who: TestAccount, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: bearer(who.accessToken, headers), json });

const trialPlan = await createTestPlan(cp, superadmin, { name: 'Trial', trial_days: 7, price: 8 });
const plan = await createTestPlan(cp, superadmin, { name: 'Monthly', type: 'live', price: 6 });
await cp.app.jobs.runDue();

const sub = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_subscription where id = ?', [id]))[0]!;
const openInvoice = async (subscriptionId: string) =>
  (await query<Record<string, any>>(cp, `select * from billing_invoice where subscription_id = ? order by created_at desc limit 1`, [subscriptionId]))[0]!;

/** Moves the clock past `when`, runs what became due (the billing clock) and logs the accounts in again. */
async function passTo(when: Date | string, ...accounts: TestAccount[]): Promise<void> {
  clock.set(new Date(new Date(when).getTime() + MINUTE));
  await cp.app.jobs.runDue();
  await relogin(cp, superadmin, admin, ...accounts);
}

/** A subscriber whose trial converted on a declining card: past_due with an open invoice and a payment_failed notice. */
async function inDunning(): Promise<{ me: Subscriber; id: string }> {
  const me = await subscriberWithCard(cp, 'tok_chargeDeclined');
  const { id } = await subscribeWithCard(cp, me, trialPlan.id);
  await passTo((await sub(id)).trial_end, me);
  t.equal((await sub(id)).status, 'past_due', 'declined at the trial end');
  return { me, id };
}

t.test('regression: a subscriber in dunning cannot fix it by updating the card (a new default card retries at once and recovers)', async (t) => {
  const { me, id } = await inDunning();
  const invoice = await openInvoice(id);
  t.match(invoice, { status: 'open', attempt_count: 1 });
  const notice = await query<{ body: string }>(cp, `select body from notification where user_id = ? and type = 'payment_failed'`, [me.id]);
  t.match(notice[0]!.body, /update your payment method/);

  const visa = await attachCard(cp, me, 'tok_visa', true);
  const s = await sub(id);
  t.match(s, { status: 'active', payment_method_id: visa, payment_method_chosen: false }, 'recovered on the new default at once, no clock pass needed');
  t.match(await openInvoice(id), { id: invoice.id, status: 'paid', attempt_count: 2, payment_method_id: visa, amount_paid_minor: '800' });
  t.same(await query(cp, 'select attempt, status, payment_method_id from billing_invoice_charge where invoice_id = ? order by attempt', [invoice.id]),
    [{ attempt: 1, status: 'declined', payment_method_id: me.pm }, { attempt: 2, status: 'succeeded', payment_method_id: visa }]);
  const read = await send(me, 'GET', `/v1/subscriptions/${id}`);
  t.match(read.body.data, { status: 'active', payment_method_id: visa, payment_method_last4: '4242', payment_method_chosen: false });
});

t.test('POST /v1/payment-methods/{id}/default on an account in dunning retries the open renewal on it at once', async (t) => {
  const { me, id } = await inDunning();
  const visa = await attachCard(cp, me, 'tok_visa'); // not the default: nothing moves yet
  t.equal((await sub(id)).status, 'past_due');
  t.equal((await openInvoice(id)).attempt_count, 1, 'a card that is not the default retries nothing');
  const made = await send(me, 'POST', `/v1/payment-methods/${visa}/default`);
  t.equal(made.status, 200, made.text);
  t.match(await sub(id), { status: 'active', payment_method_id: visa });
  t.match(await openInvoice(id), { status: 'paid', attempt_count: 2 });
});

t.test('a new default that declines too is one more attempt: still past_due, the next retry on the schedule from it, and a notice', async (t) => {
  const { me, id } = await inDunning();
  const before = await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [me.id]);
  await attachCard(cp, me, 'tok_insufficientFunds', true);
  const invoice = await openInvoice(id);
  t.match(invoice, { status: 'open', attempt_count: 2 });
  t.equal(new Date(invoice.next_attempt_at).toISOString(), new Date(clock.now().getTime() + 3 * DAY).toISOString(), 'the second retry delay (3 days) from this attempt');
  t.equal((await sub(id)).status, 'past_due');
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [me.id]), before + 1);
});

t.test('PATCH /v1/subscriptions/{id} chooses a card for the subscription: retried at once, and it no longer follows the default', async (t) => {
  const { me, id } = await inDunning();
  const visa = await attachCard(cp, me, 'tok_visa');
  const read = await send(me, 'GET', `/v1/subscriptions/${id}`);
  const chosen = await send(me, 'PATCH', `/v1/subscriptions/${id}`, { payment_method_id: visa }, { 'if-match': read.headers.get('etag')! });
  t.equal(chosen.status, 200, chosen.text);
  t.match(chosen.body.data, { status: 'active', payment_method_id: visa, payment_method_chosen: true, payment_method_last4: '4242' }, 'the answer shows the recovery');
  t.equal(await countRows(cp, 'audit_log', `action = 'subscription.payment_method_chosen' and resource_id = ? and actor_id = ?`, [id, me.id]), 1);

  // A new default does not move a subscription with a card of its own.
  const mastercard = await attachCard(cp, me, 'tok_mastercard', true);
  t.equal((await sub(id)).payment_method_id, visa, 'stays on the chosen card');
  // null: follow the default again.
  const follow = await send(me, 'PATCH', `/v1/subscriptions/${id}`, { payment_method_id: null });
  t.match(follow.body.data, { payment_method_id: mastercard, payment_method_chosen: false });
  const amex = await attachCard(cp, me, 'tok_amex', true);
  t.equal((await sub(id)).payment_method_id, amex, 'follows the next default');
});

t.test('a subscription bought with the default card follows the default; one bought with another card keeps it', async (t) => {
  const me = await subscriberWithCard(cp);
  const other = await attachCard(cp, me, 'tok_mastercard');
  const following = await subscribeWithCard(cp, me, trialPlan.id);
  const pinned = await subscribeWithCard(cp, { ...me, pm: other }, plan.id);
  t.equal(following.payment_method_chosen, false);
  t.equal(pinned.payment_method_chosen, true);
  const amex = await attachCard(cp, me, 'tok_amex', true);
  t.equal((await sub(following.id)).payment_method_id, amex);
  t.equal((await sub(pinned.id)).payment_method_id, other);
  // Deleting the pinned card moves its subscription onto the default, which it then follows.
  t.equal((await send(me, 'DELETE', `/v1/payment-methods/${other}`)).status, 204);
  t.match(await sub(pinned.id), { payment_method_id: amex, payment_method_chosen: false });
});

t.test('PATCH /v1/subscriptions/{id} refusals change nothing: bad body, another user\'s card or subscription, ended, complimentary, stale If-Match', async (t) => {
  const me = await subscriberWithCard(cp);
  const stranger = await subscriberWithCard(cp);
  const { id } = await subscribeWithCard(cp, me, plan.id);
  const etag = (await send(me, 'GET', `/v1/subscriptions/${id}`)).headers.get('etag')!;
  const row = async () => (await query(cp, 'select payment_method_id, payment_method_chosen, version from billing_subscription where id = ?', [id]))[0];
  const before = await row();
  const cases: [TestAccount, unknown, number, string?][] = [
    [me, {}, 400, 'payment_method_id'],
    [me, { payment_method_id: 'card' }, 400, 'payment_method_id'],
    [me, { payment_method_id: me.pm, extra: true }, 400],
    [me, { payment_method_id: stranger.pm }, 400, 'payment_method_id'],
    [me, { payment_method_id: crypto.randomUUID() }, 400, 'payment_method_id'],
    [stranger, { payment_method_id: stranger.pm }, 404],
  ];
  for (const [who, json, status, field] of cases) {
    const res = await send(who, 'PATCH', `/v1/subscriptions/${id}`, json);
    t.equal(res.status, status, `${JSON.stringify(json)}: ${res.text}`);
    if (field) t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `error on ${field}`);
  }
  const changed = await send(me, 'PATCH', `/v1/subscriptions/${id}`, { payment_method_id: me.pm }, { 'if-match': '"stale"' });
  t.equal(changed.status, 412);
  t.same(await row(), before, 'nothing changed');
  t.ok(etag);

  const comp = (await send(admin, 'POST', `/v1/admin/users/${me.id}/subscriptions`, { plan_id: trialPlan.id, trial_end: '2020-01-01T00:00:00Z' })).body.data;
  const refused = await send(me, 'PATCH', `/v1/subscriptions/${comp.id}`, { payment_method_id: me.pm });
  t.equal(refused.status, 409, 'a complimentary subscription is moved onto a card by an administrator only');
  t.equal((await sub(comp.id)).payment_method_id, null);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${id}/cancel`, { immediate: true })).status, 200);
  t.equal((await send(me, 'PATCH', `/v1/subscriptions/${id}`, { payment_method_id: me.pm })).status, 409, 'an ended subscription is not billed');
});
