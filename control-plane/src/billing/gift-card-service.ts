// Gift cards (document 1 §2, §4.5; DESIGN.md §5): administrators create (the
// server makes the code), list, read and disable them, audit-logged;
// subscribers look one up by its code and redeem it into their account
// balance, once. The code is a bearer secret: stored only as a keyed hash, so
// a copy of the table yields no usable code; it is shown in full once, in the
// answer to the administrator who created the card.
//
// Redeeming locks the card's row (SELECT … FOR UPDATE), checks it is still
// active and unexpired, marks it redeemed and credits the balance in the same
// transaction: concurrent redemptions of one card give exactly one credit.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { User } from '../accounts/index.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { CoreServices } from '../core/services.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, found, validationError, callerUserId as callerUserIdOf } from '../http/errors.ts';
import { creditBalance } from './balance-service.ts';
import { generateGiftCardCode, GIFT_CARD_KEY_PURPOSE, giftCardCodeHash, normaliseGiftCardCode } from './codes.ts';
import { giftCardStatus, type CreateGiftCardInput } from './gift-card-record.ts';
import { GiftCard } from './gift-card.entity.ts';
import { toMinor } from './money.ts';
import type { BillingServices } from './services.ts';

const keys = new WeakMap<object, Buffer>();
/** The key gift-card codes are hashed under (derived once per process from the secrets key). */
function codeKey(app: CoreServices): Buffer {
  let key = keys.get(app);
  if (!key) keys.set(app, (key = app.deriveKey(GIFT_CARD_KEY_PURPOSE)));
  return key;
}

/** The stored hash of a typed code, or null when the text cannot be a code. */
export function hashOfTypedCode(app: CoreServices, typed: string): { code: string; hash: string } | null {
  const code = normaliseGiftCardCode(typed);
  return code ? { code, hash: giftCardCodeHash(codeKey(app), code) } : null;
}

const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Gift cards are redeemed into user accounts');

export async function findGiftCard(em: EntityManager, id: string): Promise<GiftCard> {
  return found(await em.findOne(GiftCard, id), 'Gift card');
}

/** Creates a card with a fresh code (an administrator); returns the card and the code, which is stored nowhere. */
export async function createGiftCard(app: BillingServices, rc: RequestContext, input: CreateGiftCardInput): Promise<{ card: GiftCard; code: string }> {
  const expiresAt = input.expires_at ? new Date(input.expires_at) : null;
  if (expiresAt && expiresAt.getTime() <= app.clock.now().getTime()) throw validationError([{ field: 'expires_at', message: 'Must be in the future' }]);
  const code = generateGiftCardCode();
  const value = toMinor(input.initial_value, input.currency);
  const card = rc.em.create(GiftCard, {
    code_hash: giftCardCodeHash(codeKey(app), code),
    code_last4: code.slice(-4),
    initial_value_minor: value,
    remaining_value_minor: value,
    currency: input.currency,
    status: 'active',
    note: input.note,
    expires_at: expiresAt,
  } as never);
  recordAudit(rc, {
    action: 'gift_card.created', resource_type: 'gift_card', resource_id: card.id,
    changes: changesOf({}, card, ['code_last4', 'initial_value_minor', 'currency', 'expires_at', 'note']),
  });
  await rc.em.flush();
  return { card, code };
}

/** A card by the code the caller typed (a subscriber looking before redeeming); 404 for any code that is not a card. */
export async function lookUpGiftCard(app: BillingServices, rc: RequestContext, typed: string): Promise<{ card: GiftCard; code: string }> {
  callerUserId(rc);
  const typedCode = hashOfTypedCode(app, typed);
  const card = typedCode ? await rc.em.findOne(GiftCard, { code_hash: typedCode.hash }) : null;
  if (!card || !typedCode) throw new ApiError('NOT_FOUND', 'No gift card has this code');
  return { card, code: typedCode.code };
}

/** Why a card cannot be redeemed: 409 CONFLICT with `error_code` already_redeemed, disabled or expired. */
function notRedeemable(errorCode: 'already_redeemed' | 'disabled' | 'expired'): ApiError {
  const messages = {
    already_redeemed: 'This gift card has already been redeemed',
    disabled: 'This gift card has been disabled',
    expired: 'This gift card has expired',
  };
  return new ApiError('CONFLICT', messages[errorCode], { details: { error_code: errorCode } });
}

/**
 * Redeems a card into the caller's account balance, in the card's currency:
 * the whole value, once. Returns the card (status redeemed, remaining 0), the
 * code and the balance after the credit. Audit-logged.
 */
export async function redeemGiftCard(app: BillingServices, rc: RequestContext, typed: string): Promise<{ card: GiftCard; code: string; balanceMinor: number }> {
  const userId = callerUserId(rc);
  const typedCode = hashOfTypedCode(app, typed);
  if (!typedCode) throw new ApiError('NOT_FOUND', 'No gift card has this code');
  return inTransaction(rc, async (tx) => {
    const card = await tx.em.findOne(GiftCard, { code_hash: typedCode.hash }, { lockMode: LockMode.PESSIMISTIC_WRITE, refresh: true });
    if (!card) throw new ApiError('NOT_FOUND', 'No gift card has this code');
    const now = app.clock.now();
    const status = giftCardStatus(card, now);
    if (status === 'redeemed') throw notRedeemable('already_redeemed');
    if (status !== 'active') throw notRedeemable(status);
    const value = card.remaining_value_minor;
    card.status = 'redeemed';
    card.remaining_value_minor = 0;
    card.redeemed_by = tx.em.getReference(User, userId) as never;
    card.redeemed_at = now;
    await tx.em.flush();
    const balanceMinor = await creditBalance(tx, { userId, currency: card.currency, amountMinor: value, source: 'gift_card', referenceId: card.id });
    recordAudit(tx, {
      action: 'gift_card.redeemed', resource_type: 'gift_card', resource_id: card.id,
      changes: { status: { from: 'active', to: 'redeemed' }, remaining_value_minor: { from: value, to: 0 } },
      metadata: { user_id: userId, currency: card.currency, amount_minor: value },
    });
    await tx.em.flush();
    return { card, code: typedCode.code, balanceMinor };
  });
}

/**
 * Disables a card (an administrator): it can no longer be redeemed. A card
 * already redeemed cannot be (its value is in a balance: 409 CONFLICT); one
 * already disabled is answered unchanged.
 */
export async function disableGiftCard(app: BillingServices, rc: RequestContext, id: string): Promise<GiftCard> {
  const card = await findGiftCard(rc.em, id);
  if (card.status === 'redeemed') {
    throw new ApiError('CONFLICT', 'The card has been redeemed; its value is in the user\'s balance', { details: { error_code: 'already_redeemed' } });
  }
  if (card.status === 'disabled') return card;
  card.status = 'disabled';
  card.disabled_at = app.clock.now();
  recordAudit(rc, {
    action: 'gift_card.disabled', resource_type: 'gift_card', resource_id: card.id,
    changes: { status: { from: 'active', to: 'disabled' } }, metadata: { code_last4: card.code_last4, remaining_value_minor: card.remaining_value_minor },
  });
  await rc.em.flush();
  return card;
}
