// The GiftCard record of document 1 §2 (and the administrators' view with
// its note and timestamps), the account-balance record, and the create body.
// The records are presenters: routes hand over the card with its values as
// JSON numbers, its status by the clock, and its code as the viewer may see it.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { dateTime, lineText, orNull, timestamp, timestampOrNull, withExample } from '../http/schemas.ts';
import { formatGiftCardCode, maskGiftCardCode } from './codes.ts';
import { GIFT_CARD_STATUSES, type GiftCard, type GiftCardStatus } from './gift-card.entity.ts';
import { amountField, amountRecord, checkAmount, currencyField } from './money-fields.ts';
import { toMajor } from './money.ts';

export const giftCardRecord = z.object({
  id: z.uuid(),
  code: z.string().max(64).describe('XXXX-XXXX-XXXX-XXXX: in full where the caller gave it (or an administrator just created the card), otherwise masked to its last four'),
  initial_value: amountRecord().describe('In major units of the currency'),
  remaining_value: amountRecord().describe('0 once redeemed (the value moved into the account balance)'),
  currency: z.string(),
  status: z.enum(GIFT_CARD_STATUSES).describe('active, redeemed, disabled (by an administrator) or expired (expires_at passed)'),
  redeemed_by: orNull(z.uuid()).describe('The user who redeemed it; shown to that user and to administrators only'),
  redeemed_at: timestampOrNull(),
  expires_at: timestampOrNull(),
  created_at: timestamp(),
});

export const adminGiftCardRecord = giftCardRecord.extend({
  note: orNull(z.string()),
  disabled_at: timestampOrNull(),
  updated_at: timestamp(),
});

/** Administrators' single-card replies carry its version as ETag. */
export const adminGiftCardResource = versioned(adminGiftCardRecord);

export function giftCardStatus(card: Pick<GiftCard, 'status' | 'expires_at'>, now: Date): GiftCardStatus {
  if (card.status === 'active' && card.expires_at && card.expires_at.getTime() <= now.getTime()) return 'expired';
  return card.status;
}

export interface GiftCardView {
  now: Date;
  /** The normalised code when the viewer gave it (or it was just made); masked otherwise. */
  code?: string;
  /** A subscriber's id: redeemed_by is shown only when it is theirs. Administrators: undefined (shown). */
  viewerId?: string;
}

/** The value a route hands over for a gift-card record. */
export function presentGiftCard(card: GiftCard, view: GiftCardView) {
  const redeemedBy = card.redeemed_by?.id ?? null;
  return {
    ...card,
    code: view.code ? formatGiftCardCode(view.code) : maskGiftCardCode(card.code_last4),
    initial_value: toMajor(card.initial_value_minor, card.currency),
    remaining_value: toMajor(card.remaining_value_minor, card.currency),
    status: giftCardStatus(card, view.now),
    redeemed_by: view.viewerId === undefined || view.viewerId === redeemedBy ? redeemedBy : null,
  };
}

export const balanceRecord = z.object({
  currency: z.string(),
  balance: amountRecord().describe('In major units of the currency; applied to later invoices in that currency'),
  updated_at: timestamp(),
});

export function presentBalance(row: { currency: string; balance_minor: number; updated_at: Date }) {
  return { currency: row.currency, balance: toMajor(row.balance_minor, row.currency), updated_at: row.updated_at };
}

export const createGiftCardBody = withExample(z.strictObject({
  initial_value: amountField('The card\'s value.', { positive: true }),
  currency: currencyField(),
  expires_at: dateTime().nullable().default(null).describe('null: never expires. Must be in the future.'),
  note: lineText(500).nullable().default(null).describe('For administrators (campaign, order number); never shown to subscribers'),
}).superRefine((body, ctx) => checkAmount(ctx, body.initial_value, body.currency, 'initial_value')), { initial_value: 25, currency: 'EUR', note: 'Holiday campaign, order 10042' });
export type CreateGiftCardInput = z.output<typeof createGiftCardBody>;
