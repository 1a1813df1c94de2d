// Which payment method a subscription is billed to (issue 20, item 3;
// docs/decisions.md "Payment methods of subscriptions"): the account's
// default, unless one was chosen for the subscription (payment_method_chosen),
// or none (complimentary, an administrator's). When the default changes, the
// subscriptions that follow it move with it, and an open invoice of a live
// subscription now billed to a new method is due at once: the caller retries
// it after its commit (as Stripe retries when the customer updates the card).
import type { EntityManager } from '@mikro-orm/postgresql';
import { LIVE_SUBSCRIPTION_STATUSES } from './billing.entities.ts';
import { PaymentMethod } from './payment-method.entity.ts';

/**
 * A user's payment method by id, for billing (a subscription records the
 * method it is billed to and shows its last4): null when that user holds no
 * such method, whoever else may hold it.
 */
export async function findUserPaymentMethod(em: EntityManager, userId: string, paymentMethodId: string): Promise<PaymentMethod | null> {
  return em.findOne(PaymentMethod, { id: paymentMethodId, user: userId });
}

/** The user's default method, if any (what a subscription is billed to unless one was chosen for it). */
export async function findDefaultPaymentMethod(em: EntityManager, userId: string): Promise<PaymentMethod | null> {
  return em.findOne(PaymentMethod, { user: userId, is_default: true });
}

const live = `status in (${LIVE_SUBSCRIPTION_STATUSES.map((s) => `'${s}'`).join(', ')})`;

/**
 * The account's default became `defaultId`: its live subscriptions that
 * follow the default (billed to a method, none chosen for them) are billed to
 * it from now on, raw rows moved with their version as the ORM would. Then
 * the open invoices now billed to it are due at once (see dueNow). In the
 * caller's transaction; returns those invoices' ids.
 */
export async function followDefault(em: EntityManager, userId: string, defaultId: string, now: Date): Promise<string[]> {
  await em.execute(
    `update billing_subscription set payment_method_id = ?, updated_at = ?, version = version + 1
     where user_id = ? and ${live} and payment_method_id is not null and payment_method_id <> ? and not payment_method_chosen`,
    [defaultId, now, userId, defaultId]);
  return dueNow(em, userId, defaultId, now);
}

/**
 * The open invoices of the user's live subscriptions billed to `methodId`
 * (a renewal in dunning) become due now, so the caller's retry (or the next
 * pass of the billing clock) charges the method at once. Returns their ids.
 */
export async function dueNow(em: EntityManager, userId: string, methodId: string, now: Date): Promise<string[]> {
  const rows = await em.execute<{ id: string }[]>(
    `update billing_invoice i set next_attempt_at = ?, updated_at = ?, version = i.version + 1
     from billing_subscription s
     where i.subscription_id = s.id and i.user_id = ? and i.status = 'open' and s.${live} and s.payment_method_id = ?
     returning i.id`, [now, now, userId, methodId]);
  return rows.map((r) => r.id);
}
