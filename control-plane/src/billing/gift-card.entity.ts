// Gift cards (document 1 §2 "GiftCard") and the account balance they feed.
// A card's code is a bearer secret worth money: only its keyed hash (HMAC) is
// stored, plus its last four characters for display; the full code is shown
// once, when an administrator creates the card. Redeeming moves the whole
// value into the user's balance in the card's currency, once.
//
// The balance is a ledger (billing_balance_entry: every credit and debit with
// its source) and one row per user and currency holding the running total
// (billing_account_balance), which is what concurrent debits lock. The total
// always equals the sum of the user's entries in that currency.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';

/** What is stored; `expired` is computed from expires_at (gift-card-record.ts). */
export const GIFT_CARD_STORED_STATUSES = ['active', 'redeemed', 'disabled'] as const;
export const GIFT_CARD_STATUSES = ['active', 'redeemed', 'disabled', 'expired'] as const;
export type GiftCardStatus = (typeof GIFT_CARD_STATUSES)[number];

export const GiftCardSchema = defineEntity({
  name: 'GiftCard',
  tableName: 'billing_gift_card',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    /** HMAC-SHA256 of the normalised code (hex). */
    code_hash: p.string().length(64),
    /** The code's last four characters, for masked display. */
    code_last4: p.string().length(4),
    initial_value_minor: p.bigint('number'),
    remaining_value_minor: p.bigint('number'),
    currency: p.string().length(3),
    status: p.enum(GIFT_CARD_STORED_STATUSES),
    /** An administrator's note (campaign, order number). */
    note: p.string().length(500).nullable(),
    redeemed_by: () => p.manyToOne(User).nullable().deleteRule('set null'),
    redeemed_at: p.datetime().nullable(),
    expires_at: p.datetime().nullable(),
    disabled_at: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [{ name: 'billing_gift_card_created_at_idx', properties: ['created_at', 'id'] }],
  uniques: [{ name: 'billing_gift_card_code_hash_key', properties: ['code_hash'] }],
  checks: [
    { name: 'billing_gift_card_value_check', expression: 'initial_value_minor > 0 and remaining_value_minor >= 0 and remaining_value_minor <= initial_value_minor' },
  ],
});
export class GiftCard extends GiftCardSchema.class {}
GiftCardSchema.setClass(GiftCard);

export const BALANCE_ENTRY_KINDS = ['credit', 'debit'] as const;
export type BalanceEntryKind = (typeof BALANCE_ENTRY_KINDS)[number];
/** Where an entry comes from: a redeemed gift card, an invoice it paid, a refund into the balance, an administrator's adjustment. */
export const BALANCE_SOURCES = ['gift_card', 'invoice', 'refund', 'adjustment'] as const;
export type BalanceSource = (typeof BALANCE_SOURCES)[number];

export const AccountBalanceSchema = defineEntity({
  name: 'AccountBalance',
  tableName: 'billing_account_balance',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    currency: p.string().length(3),
    balance_minor: p.bigint('number'),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  uniques: [{ name: 'billing_account_balance_user_currency_key', properties: ['user', 'currency'] }],
  checks: [{ name: 'billing_account_balance_non_negative', expression: 'balance_minor >= 0' }],
});
export class AccountBalance extends AccountBalanceSchema.class {}
AccountBalanceSchema.setClass(AccountBalance);

export const BalanceEntrySchema = defineEntity({
  name: 'BalanceEntry',
  tableName: 'billing_balance_entry',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    currency: p.string().length(3),
    kind: p.enum(BALANCE_ENTRY_KINDS),
    /** Always positive; the kind says which way it moved. */
    amount_minor: p.bigint('number'),
    /** The balance in this currency after the entry. */
    balance_after_minor: p.bigint('number'),
    source: p.enum(BALANCE_SOURCES),
    /** The gift card, invoice or refund it came from. */
    reference_id: p.uuid().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  indexes: [{ name: 'billing_balance_entry_user_idx', properties: ['user', 'currency', 'created_at'] }],
  checks: [{ name: 'billing_balance_entry_amount_check', expression: 'amount_minor > 0 and balance_after_minor >= 0' }],
});
export class BalanceEntry extends BalanceEntrySchema.class {}
BalanceEntrySchema.setClass(BalanceEntry);
