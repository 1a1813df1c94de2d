// Billing fixtures for API tests: a logged-in subscriber with a card of the
// test gateway, plans, subscriptions, and the account balance as stored.
import { bearer, createLoggedInUser, login, query, type TestAccount } from './auth.ts';
import type { TestControlPlane } from './control-plane.ts';

export type Subscriber = TestAccount & { pm: string };

/** Attaches a test-gateway card (`tok_visa`, `tok_chargeDeclined`, …) to the account; its id. */
export async function attachCard(cp: TestControlPlane, who: TestAccount, token: string, setAsDefault = false): Promise<string> {
  const res = await cp.request('POST', '/v1/payment-methods', { headers: bearer(who.accessToken), json: { payment_method_token: token, set_as_default: setAsDefault } });
  if (res.status !== 201) throw new Error(`attach ${token}: ${res.status} ${res.text}`);
  return res.body.data.id;
}

/** A new logged-in subscriber holding one card (its default). */
export async function subscriberWithCard(cp: TestControlPlane, token = 'tok_visa'): Promise<Subscriber> {
  const user = await createLoggedInUser(cp);
  return { ...user, pm: await attachCard(cp, user, token) };
}

/** A plan created by a superadmin (an svod EUR monthly plan unless `overrides` say otherwise). */
export async function createTestPlan(cp: TestControlPlane, superadmin: TestAccount, overrides: Record<string, unknown> = {}): Promise<{ id: string; price: number; type: string }> {
  const res = await cp.request('POST', '/v1/admin/plans', {
    headers: bearer(superadmin.accessToken),
    json: {
      name: 'Standard', type: 'svod', price: 9.99, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 2, max_concurrent_streams: 2,
      max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, ...overrides,
    },
  });
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data;
}

/** Subscribes with the subscriber's card; the subscription record. */
export async function subscribeWithCard(cp: TestControlPlane, who: Subscriber, planId: string, extra: Record<string, unknown> = {}): Promise<Record<string, any>> {
  const res = await cp.request('POST', '/v1/subscriptions', { headers: bearer(who.accessToken), json: { plan_id: planId, payment_method_id: who.pm, ...extra } });
  if (res.status !== 201) throw new Error(`subscribe: ${res.status} ${res.text}`);
  return res.body.data;
}

/** New access tokens for the accounts (after the clock moved past their life). */
export async function relogin(cp: TestControlPlane, ...accounts: TestAccount[]): Promise<void> {
  for (const account of accounts) Object.assign(account, await login(cp, account.email, account.password));
}

/** The account's balance in a currency, as stored (minor units). */
export async function storedBalance(cp: TestControlPlane, userId: string, currency = 'EUR'): Promise<number> {
  const [row] = await query<{ b: string }>(cp, 'select balance_minor as b from billing_account_balance where user_id = ? and currency = ?', [userId, currency]);
  return Number(row?.b ?? 0);
}
