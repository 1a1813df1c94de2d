// Payment methods (document 1 §4.4, DESIGN.md §5): list, attach from a
// gateway token, make default, read the default, delete. Rules:
// - a user's first method becomes the default; one default per user (a
//   partial unique index holds it);
// - the default cannot be deleted while the user has a live subscription
//   (409 DEFAULT_PAYMENT_METHOD_IN_USE); deleting the default otherwise makes
//   the newest remaining method the default; deleting another method moves
//   the live subscriptions billed to it onto the default;
// - another user's method is a 404 and nothing changes, unless the caller
//   holds the permission globally (an admin), who may act on anyone's.
// Every change to a user's methods first locks the user's row, so two
// requests of one user (two first attaches, attach and delete) cannot both
// decide which method is the default.
//
// Subscriptions follow the default unless a method was chosen for them
// (subscription-payment-method.ts): a new default moves them, and an open
// renewal invoice now billed to it is retried at once, after the commit.
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, assertThat, callerUserId as callerUserIdOf, validationError } from '../http/errors.ts';
import { LIVE_SUBSCRIPTION_STATUSES, Subscription } from './billing.entities.ts';
import { GatewayError, type GatewayPaymentMethod } from './gateway/payment-gateway.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import { retryInvoicesNow } from './billing-clock.ts';
import type { BillingServices } from './services.ts';
import { dueNow, findDefaultPaymentMethod, findUserPaymentMethod, followDefault } from './subscription-payment-method.ts';
import { findCallersSubscription } from './subscription-service.ts';

/** At most this many saved methods per user: the list is unpaged (document 1 §4.4), and attaching is an abuse target. */
export const MAX_PAYMENT_METHODS_PER_USER = 20;

const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Payment methods belong to user accounts');

/** Serialises changes to one user's payment methods (held until the transaction ends). */
async function lockOwner(tx: EntityManager, userId: string): Promise<void> {
  await tx.execute('select id from app_user where id = ? for update', [userId]);
}

/** The caller's methods: the default first, then the newest first. */
export async function listPaymentMethods(rc: RequestContext): Promise<PaymentMethod[]> {
  return rc.em.find(PaymentMethod, { user: callerUserId(rc) }, { orderBy: { is_default: 'desc', created_at: 'desc', id: 'desc' } });
}

/** The caller's default method; 404 when they have none. */
export async function readDefaultPaymentMethod(rc: RequestContext): Promise<PaymentMethod> {
  const method = await rc.em.findOne(PaymentMethod, { user: callerUserId(rc), is_default: true });
  if (!method) throw new ApiError('NOT_FOUND', 'No default payment method');
  return method;
}

/** A method the caller may act on: their own, or anyone's for a global holder of the permission; 404 otherwise. */
export async function findActionablePaymentMethod(em: EntityManager, rc: RequestContext, id: string): Promise<PaymentMethod> {
  const userId = callerUserId(rc);
  const method = await em.findOne(PaymentMethod, rc.access === 'global' ? { id } : { id, user: userId });
  if (!method) throw new ApiError('NOT_FOUND', 'Payment method not found');
  return method;
}

/** Records changes made to someone else's methods (an administrator acting on a user's account). */
function auditIfNotOwner(rc: RequestContext, tx: EntityManager, method: PaymentMethod, action: string, metadata: Record<string, unknown>): void {
  const ownerId = method.user.id;
  if (ownerId === rc.actor?.id) return;
  recordAudit(rc, { action, resource_type: 'payment_method', resource_id: method.id, metadata: { user_id: ownerId, ...metadata } }, tx);
}

/** Demotes the owner's current default, if it is another method, and flushes so the unique index sees one default at a time. */
async function demoteDefault(tx: EntityManager, userId: string, except?: string): Promise<void> {
  const current = await tx.findOne(PaymentMethod, { user: userId, is_default: true });
  if (current && current.id !== except) {
    current.is_default = false;
    await tx.flush();
  }
}

/** The refusals a gateway gives at attach, as API errors (the token is named; its value never is). */
function attachRefusal(error: unknown): unknown {
  if (!(error instanceof GatewayError)) return error;
  switch (error.kind) {
    case 'invalid_token':
      return new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'payment_method_token', message: error.message }] });
    case 'card_declined':
      return new ApiError('PAYMENT_FAILED', error.message, { details: { decline_code: error.reason ?? 'card_declined' } });
    case 'unavailable':
      return new ApiError('SERVICE_UNAVAILABLE', 'The payment provider is unavailable; retry later');
    default:
      return error;
  }
}

export interface AttachInput {
  payment_method_token: string;
  set_as_default: boolean;
  billing_name?: string;
  /** The request's Idempotency-Key, passed on to the gateway so a retried attach makes one method there. */
  idempotencyKey?: string;
}

const tooMany = () => new ApiError('CONFLICT', `A user can keep at most ${MAX_PAYMENT_METHODS_PER_USER} payment methods; delete one first`);

export async function attachPaymentMethod(app: BillingServices, rc: RequestContext, input: AttachInput): Promise<PaymentMethod> {
  const userId = callerUserId(rc);
  // Checked before the gateway is asked (and again under the lock).
  if (await rc.em.count(PaymentMethod, { user: userId }) >= MAX_PAYMENT_METHODS_PER_USER) throw tooMany();

  const gateway = app.paymentGateway;
  let held: GatewayPaymentMethod;
  try {
    held = await gateway.attach({
      token: input.payment_method_token,
      customerRef: userId,
      idempotencyKey: input.idempotencyKey ? `attach:${userId}:${input.idempotencyKey}` : undefined,
    });
  } catch (error) {
    throw attachRefusal(error);
  }

  let retry: string[] = [];
  let method: PaymentMethod;
  try {
    method = await rc.em.transactional(async (tx) => {
      await lockOwner(tx, userId);
      if (await tx.count(PaymentMethod, { user: userId }) >= MAX_PAYMENT_METHODS_PER_USER) throw tooMany();
      const hasDefault = (await tx.count(PaymentMethod, { user: userId, is_default: true })) > 0;
      const makeDefault = input.set_as_default || !hasDefault;
      if (makeDefault) await demoteDefault(tx, userId);
      const method = tx.create(PaymentMethod, {
        user: userId,
        gateway: gateway.name,
        gateway_payment_method_id: held.id,
        type: held.type,
        brand: held.brand,
        last4: held.last4,
        exp_month: held.exp_month,
        exp_year: held.exp_year,
        billing_name: input.billing_name ?? held.billing_name,
        billing_country: held.billing_country ?? held.country,
        wallet_email: held.wallet_email,
        is_default: makeDefault,
      } as never);
      await tx.flush();
      if (makeDefault) retry = await followDefault(tx, userId, method.id, app.clock.now());
      return method;
    });
  } catch (error) {
    // Not saved here: the gateway need not keep it either.
    await detachQuietly(app, rc, gateway.name, held.id);
    throw error;
  }
  await retryQuietly(app, rc, retry);
  return method;
}

/**
 * Retries at once the open invoices a payment-method change made due (the
 * change is committed and stands whatever the charge answers; a gateway that
 * fails leaves them due for the billing clock's next pass).
 */
async function retryQuietly(app: BillingServices, rc: RequestContext, invoiceIds: readonly string[]): Promise<void> {
  if (!invoiceIds.length) return;
  try {
    await retryInvoicesNow(app, rc, invoiceIds);
  } catch (error) {
    rc.log.warn({ err: error, invoices: invoiceIds }, 'retry after a payment method change failed; the billing clock retries');
  }
}

/** Makes the method its owner's default (DESIGN.md §5: POST /v1/payment-methods/{pm_id}/default). */
export async function makeDefaultPaymentMethod(app: BillingServices, rc: RequestContext, id: string): Promise<PaymentMethod> {
  let retry: string[] = [];
  const made = await rc.em.transactional(async (tx) => {
    const found = await findActionablePaymentMethod(tx, rc, id);
    const ownerId = found.user.id;
    await lockOwner(tx, ownerId);
    // Read again under the lock: a concurrent delete or default change has finished by now.
    const method = await tx.findOne(PaymentMethod, { id, user: ownerId }, { refresh: true });
    if (!method) throw new ApiError('NOT_FOUND', 'Payment method not found');
    if (method.is_default) return method;
    await demoteDefault(tx, ownerId, method.id);
    method.is_default = true;
    auditIfNotOwner(rc, tx, method, 'payment_method.made_default', {});
    await tx.flush();
    retry = await followDefault(tx, ownerId, method.id, app.clock.now());
    return method;
  });
  await retryQuietly(app, rc, retry);
  return made;
}

/** Deletes a method (document 1 §4.4), then forgets it at the gateway. */
export async function deletePaymentMethod(app: BillingServices, rc: RequestContext, id: string): Promise<void> {
  const removed = await rc.em.transactional(async (tx) => {
    const found = await findActionablePaymentMethod(tx, rc, id);
    const ownerId = found.user.id;
    await lockOwner(tx, ownerId);
    const method = await tx.findOne(PaymentMethod, { id, user: ownerId }, { refresh: true });
    if (!method) throw new ApiError('NOT_FOUND', 'Payment method not found');
    const live = { user: ownerId, status: { $in: [...LIVE_SUBSCRIPTION_STATUSES] } };
    if (method.is_default) {
      if (await tx.count(Subscription, live) > 0) {
        throw new ApiError('DEFAULT_PAYMENT_METHOD_IN_USE', 'The default payment method cannot be removed while a subscription is active; make another method the default first');
      }
      tx.remove(method);
      await tx.flush();
      // The newest remaining method takes over, so a user with methods always has a default.
      const next = await tx.findOne(PaymentMethod, { user: ownerId }, { orderBy: { created_at: 'desc', id: 'desc' } });
      if (next) next.is_default = true;
    } else {
      // Live subscriptions billed to this method follow the default from now on.
      const fallback = await tx.findOne(PaymentMethod, { user: ownerId, is_default: true });
      for (const subscription of await tx.find(Subscription, { ...live, payment_method_id: method.id })) {
        subscription.payment_method_id = fallback?.id ?? null;
        subscription.payment_method_chosen = false;
      }
      tx.remove(method);
    }
    auditIfNotOwner(rc, tx, method, 'payment_method.deleted', { last4: method.last4, was_default: method.is_default });
    await tx.flush();
    return { gateway: method.gateway, gatewayId: method.gateway_payment_method_id };
  });
  await detachQuietly(app, rc, removed.gateway, removed.gatewayId);
}

/** Detaching is housekeeping at the gateway: a failure is logged, never the caller's problem. */
async function detachQuietly(app: BillingServices, rc: RequestContext, gatewayName: string, gatewayId: string): Promise<void> {
  if (gatewayName !== app.paymentGateway.name) return; // held by a gateway this deployment no longer uses
  try {
    await app.paymentGateway.detach(gatewayId);
  } catch (error) {
    rc.log.warn({ err: error, gateway: gatewayName }, 'payment method not detached at the gateway');
  }
}

/**
 * Chooses the method a subscription is billed to (PATCH /v1/subscriptions/{id}),
 * whatever the account's default; null: none of its own, it follows the
 * default again. An open renewal invoice of the subscription (past due) is
 * charged to it at once, after the commit. Ended subscriptions are not
 * billed (409), nor complimentary ones, which only an administrator moves
 * onto a method (409). Audit-logged (`subscription.payment_method_chosen`).
 */
export async function chooseSubscriptionPaymentMethod(app: BillingServices, rc: RequestContext, subscriptionId: string, methodId: string | null): Promise<Subscription> {
  const now = app.clock.now();
  const { subscription, retry } = await inTransaction(rc, async (tx) => {
    const subscription = await findCallersSubscription(tx, subscriptionId);
    const ownerId = subscription.user.id;
    await lockOwner(tx.em, ownerId);
    await tx.em.refresh(subscription);
    assertThat((LIVE_SUBSCRIPTION_STATUSES as readonly string[]).includes(subscription.status),
      new ApiError('CONFLICT', `The subscription has ended (${subscription.status}); it is not billed any more`));
    assertThat(subscription.payment_method_id !== null,
      new ApiError('CONFLICT', 'The subscription is complimentary (billed by nobody); an administrator can move it onto a payment method'));
    const method = methodId ? await findUserPaymentMethod(tx.em, ownerId, methodId) : await findDefaultPaymentMethod(tx.em, ownerId);
    if (!method) throw validationError([{ field: 'payment_method_id', message: methodId ? 'No such payment method on this account' : 'The account has no default payment method' }]);
    const before = { payment_method_id: subscription.payment_method_id, payment_method_chosen: subscription.payment_method_chosen };
    subscription.payment_method_id = method.id;
    subscription.payment_method_chosen = methodId !== null;
    recordAudit(tx, {
      action: 'subscription.payment_method_chosen', resource_type: 'subscription', resource_id: subscription.id,
      changes: changesOf(before, { payment_method_id: subscription.payment_method_id, payment_method_chosen: subscription.payment_method_chosen }),
      metadata: { user_id: ownerId, last4: method.last4 },
    });
    await tx.em.flush();
    return { subscription, retry: await dueNow(tx.em, ownerId, method.id, now) };
  });
  await retryQuietly(app, rc, retry);
  // As stored now (a retry may have recovered it), in a unit of work of its own.
  return rc.em.fork().findOneOrFail(Subscription, subscription.id, { populate: ['plan'] });
}
