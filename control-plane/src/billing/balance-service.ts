// The account balance (gift-card.entity.ts): money a user holds with us, one
// balance per currency (no conversion ever happens), fed by redeemed gift
// cards and spent by later invoices. Every movement is a ledger entry; the
// per-currency row holds the running total and is what concurrent movements
// serialise on (an upsert for credits, SELECT … FOR UPDATE for debits), so the
// total always equals the sum of the entries and never goes below zero.
//
// Both functions join the caller's transaction (the billing engine debits
// inside the transaction that settles an invoice) or run in their own.
import type { EntityManager } from '@mikro-orm/postgresql';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { BalanceEntry, type BalanceSource } from './gift-card.entity.ts';
import { currencyOf, MAX_MINOR, MoneyError } from './money.ts';

export interface BalanceMovement {
  userId: string;
  currency: string;
  source: BalanceSource;
  /** The gift card, invoice or refund the movement comes from. */
  referenceId?: string | null;
}

function assertAmount(amountMinor: number, what: string): void {
  if (!Number.isSafeInteger(amountMinor) || amountMinor < 0 || amountMinor > MAX_MINOR) {
    throw new MoneyError(`${what} must be an integer of minor units in 0..${MAX_MINOR}, got ${amountMinor}`);
  }
}

/**
 * Adds `amountMinor` (> 0) to the user's balance in `currency` and records
 * the credit. Returns the balance after it. A balance may not grow beyond
 * MAX_MINOR (409 CONFLICT, nothing changed).
 */
export async function creditBalance(rc: RequestContext, input: BalanceMovement & { amountMinor: number }): Promise<number> {
  assertAmount(input.amountMinor, 'A credit');
  if (input.amountMinor === 0) throw new MoneyError('A credit must be above 0');
  currencyOf(input.currency);
  return inTransaction(rc, async (tx) => {
    const now = new Date();
    const [row] = await tx.em.execute<{ balance_minor: string }[]>(
      `insert into billing_account_balance (id, user_id, currency, balance_minor, updated_at) values (?, ?, ?, ?, ?)
       on conflict (user_id, currency) do update
         set balance_minor = billing_account_balance.balance_minor + excluded.balance_minor, updated_at = excluded.updated_at
         where billing_account_balance.balance_minor + excluded.balance_minor <= ?
       returning balance_minor`,
      [crypto.randomUUID(), input.userId, input.currency, input.amountMinor, now, MAX_MINOR],
    );
    if (!row) throw new ApiError('CONFLICT', `The ${input.currency} balance cannot hold more`);
    const after = Number(row.balance_minor);
    tx.em.create(BalanceEntry, {
      user: input.userId, currency: input.currency, kind: 'credit', amount_minor: input.amountMinor, balance_after_minor: after,
      source: input.source, reference_id: input.referenceId ?? null, created_at: now,
    } as never);
    await tx.em.flush();
    return after;
  });
}

/**
 * Spends up to `maxMinor` of the user's balance in `currency` (the billing
 * engine, paying part or all of an invoice) and records the debit. Returns
 * what was applied: min(balance, maxMinor), 0 when there is no balance (and
 * then nothing is recorded). Concurrent debits take turns on the balance row.
 */
export async function debitBalance(rc: RequestContext, input: BalanceMovement & { maxMinor: number }): Promise<number> {
  assertAmount(input.maxMinor, 'A debit');
  currencyOf(input.currency);
  if (input.maxMinor === 0) return 0;
  return inTransaction(rc, async (tx) => {
    const [row] = await tx.em.execute<{ balance_minor: string }[]>(
      'select balance_minor from billing_account_balance where user_id = ? and currency = ? for update', [input.userId, input.currency]);
    const balance = row ? Number(row.balance_minor) : 0;
    const applied = Math.min(balance, input.maxMinor);
    if (applied === 0) return 0;
    const now = new Date();
    await tx.em.execute('update billing_account_balance set balance_minor = balance_minor - ?, updated_at = ? where user_id = ? and currency = ?',
      [applied, now, input.userId, input.currency]);
    tx.em.create(BalanceEntry, {
      user: input.userId, currency: input.currency, kind: 'debit', amount_minor: applied, balance_after_minor: balance - applied,
      source: input.source, reference_id: input.referenceId ?? null, created_at: now,
    } as never);
    await tx.em.flush();
    return applied;
  });
}

/** The user's balance in `currency` (minor units; 0 when none). */
export async function balanceOf(em: EntityManager, userId: string, currency: string): Promise<number> {
  const [row] = await em.execute<{ balance_minor: string }[]>(
    'select balance_minor from billing_account_balance where user_id = ? and currency = ?', [userId, currency]);
  return row ? Number(row.balance_minor) : 0;
}

/** Every balance the user holds, by currency code (those at 0 included: they show the currency was used). */
export async function balancesOf(em: EntityManager, userId: string): Promise<{ currency: string; balance_minor: number; updated_at: Date }[]> {
  const rows = await em.execute<{ currency: string; balance_minor: string; updated_at: Date }[]>(
    'select currency, balance_minor, updated_at from billing_account_balance where user_id = ? order by currency', [userId]);
  return rows.map((r) => ({ currency: r.currency, balance_minor: Number(r.balance_minor), updated_at: r.updated_at }));
}
