// Account deletion (document 1 §3, §4.1, part 8; GDPR Art. 17; DESIGN.md §5):
// the subscriber asks (DELETE /v1/users/me, or POST .../deletion-request with
// the password and a reason); in one transaction the request is stored with
// its erasure 30 days ahead, the erasure job is scheduled for then, live
// subscriptions end at once without refund, and the request is audit-logged.
// During the grace period the owner may still log in, read the account,
// export their data and cancel (the guard refuses the rest with 403
// ACCOUNT_PENDING_DELETION). Canceling withdraws the job and restores access.
// When the grace ends, the erasure job has every personal-data provider
// erase what it holds: the user row stays as a tombstone (status deleted,
// e-mail replaced), records kept for accounting keep no personal data.
import { LockMode } from '@mikro-orm/core';
import { z } from 'zod';
import { recordAudit } from '../audit/audit.ts';
import { DAY, MINUTE } from '../core/clock.ts';
import { usableIdentifiers } from '../core/personal-data.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, callerUserId as callerUserIdOf } from '../http/errors.ts';
import { jobsFor } from '../jobs/index.ts';
import { DeletionRequest } from './deletion-request.entity.ts';
import type { AccountsServices } from './services.ts';

/** The grace period between the request and the erasure (document 1 part 8). */
export const DELETION_GRACE_MS = 30 * DAY;

const erasureKey = (userId: string) => `user:${userId}`;

const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Only a user account can be deleted this way');

export interface DeletionInput {
  /** Which operation asked: DELETE /v1/users/me (first) or POST /v1/users/me/deletion-request (second, with a reason). */
  form: 'first' | 'second';
  /** The account's password, checked (required by the second form; one proof of the first). */
  password?: string;
  /** A step-up token of the caller's session (X-Step-Up-Token; the first form's other proof). */
  stepUpToken?: string;
  reason?: string | null;
}

/**
 * Requests the deletion of the caller's account. A request already pending
 * is answered as it is (nothing changes: the schedule does not move), so
 * repeating the request — DELETE is idempotent — is harmless. The caller
 * proves, beyond the access token, that they are the account's owner now:
 * with the password (a wrong one is 400 on `password` and changes nothing)
 * or, in the first form, with a fresh step-up token (403 STEP_UP_REQUIRED
 * without either), since the deletion ends every paid subscription at once
 * without refund and a stolen access token alone must not do that.
 */
export async function requestAccountDeletion(app: AccountsServices, rc: RequestContext, input: DeletionInput): Promise<{ request: DeletionRequest; created: boolean }> {
  const userId = callerUserId(rc);
  if (input.password !== undefined) {
    if (!(await app.checkPassword(rc, userId, input.password))) {
      throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'password', message: 'Incorrect password' }] });
    }
  } else if (input.stepUpToken) {
    await app.requireStepUp(rc, input.stepUpToken);
  } else {
    throw new ApiError('STEP_UP_REQUIRED', 'Deleting the account needs its password (body `password`) or a step-up token (X-Step-Up-Token)');
  }
  return inTransaction(rc, async (tx) => {
    // One request at a time per account: concurrent requests wait here, then find the first.
    await tx.em.execute('select id from app_user where id = ? for update', [userId]);
    const pending = await tx.em.findOne(DeletionRequest, { user: userId, status: 'pending' });
    if (pending) return { request: pending, created: false };

    const now = app.clock.now();
    const scheduled = new Date(now.getTime() + DELETION_GRACE_MS);
    const request = tx.em.create(DeletionRequest, {
      user: userId, status: 'pending', reason: input.reason ?? null, requested_at: now, scheduled_deletion_at: scheduled,
    } as never);
    await tx.em.flush();
    const subscriptionsEnded = await app.endSubscriptionsForDeletion(tx, userId);
    // A job left over from an earlier, canceled request would hold the key: withdraw it first.
    await app.jobs.cancel(erasureJob, erasureKey(userId), { em: tx.em });
    await app.jobs.enqueue(erasureJob, { deletion_request_id: request.id }, { runAt: scheduled, uniqueKey: erasureKey(userId), em: tx.em });
    recordAudit(tx, {
      action: 'account.deletion_requested', resource_type: 'user', resource_id: userId,
      metadata: {
        deletion_request_id: request.id, scheduled_deletion_at: scheduled, form: input.form, confirmed_by: input.password === undefined ? 'step_up' : 'password_check',
        subscriptions_canceled: subscriptionsEnded,
      },
    });
    // The owner hears of it at once (account security: someone holding the session could have asked).
    await app.notifyUser(tx, {
      userId,
      type: 'account_deletion_requested',
      priority: 'high',
      title: 'Your account is scheduled for deletion',
      body: `Your account and its personal data will be erased on ${scheduled.toISOString().slice(0, 10)} (UTC). `
        + (subscriptionsEnded > 0 ? 'Your subscriptions have been canceled. ' : '')
        + 'Until then you can sign in and cancel the deletion. If you did not ask for this, sign in, cancel it and change your password.',
    });
    await tx.em.flush();
    return { request, created: true };
  });
}

/** The caller's latest deletion request (pending, canceled or completed); 404 when there is none. */
export async function latestDeletionRequest(rc: RequestContext): Promise<DeletionRequest> {
  const request = await rc.em.findOne(DeletionRequest, { user: callerUserId(rc) }, { orderBy: { requested_at: 'desc', id: 'desc' } });
  if (!request) throw new ApiError('NOT_FOUND', 'No deletion request');
  return request;
}

/**
 * Cancels the caller's pending deletion during the grace period (document 1
 * §3): full access again, the erasure job withdrawn, audit-logged. Ended
 * subscriptions stay ended. 404 without a pending request (none, or the
 * erasure has begun and holds the request).
 */
export async function cancelAccountDeletion(app: AccountsServices, rc: RequestContext): Promise<DeletionRequest> {
  const userId = callerUserId(rc);
  return inTransaction(rc, async (tx) => {
    const pending = await tx.em.findOne(DeletionRequest, { user: userId, status: 'pending' }, { lockMode: LockMode.PESSIMISTIC_WRITE });
    if (!pending) throw new ApiError('NOT_FOUND', 'No pending deletion request');
    pending.status = 'canceled';
    pending.canceled_at = app.clock.now();
    await app.jobs.cancel(erasureJob, erasureKey(userId), { em: tx.em });
    recordAudit(tx, { action: 'account.deletion_canceled', resource_type: 'user', resource_id: userId, metadata: { deletion_request_id: pending.id } });
    await tx.em.flush();
    return pending;
  });
}

/**
 * The erasure at the end of the grace period, in one transaction: the
 * request is locked (a cancel racing the erasure waits, then finds nothing
 * pending; a second run finds it completed and does nothing), every
 * provider's identifiers are gathered before anything is erased, then every
 * provider erases what it holds (the holders above accounts first, the user
 * row last), and the request is completed.
 */
export async function eraseAccount(app: AccountsServices, rc: RequestContext, deletionRequestId: string): Promise<'erased' | 'skipped'> {
  return inTransaction(rc, async (tx) => {
    const request = await tx.em.findOne(DeletionRequest, deletionRequestId, { lockMode: LockMode.PESSIMISTIC_WRITE });
    if (!request || request.status !== 'pending') return 'skipped';
    const now = app.clock.now();
    // Early (a clock set back, or a replica's skewed clock): the housekeeping sweep enqueues it again when due.
    if (request.scheduled_deletion_at.getTime() > now.getTime()) return 'skipped';
    const userId = request.user.id;

    const identifiers: string[] = [];
    for (const provider of app.personalData) {
      if (provider.identifiers) identifiers.push(...await provider.identifiers(tx, userId, app));
    }
    const subject = { userId, identifiers: usableIdentifiers(identifiers) };
    for (const provider of [...app.personalData].reverse()) await provider.erase(tx, subject, app);

    request.status = 'completed';
    request.completed_at = now;
    request.reason = null;
    recordAudit(tx, { action: 'account.erased', resource_type: 'user', resource_id: userId, metadata: { deletion_request_id: request.id } });
    await tx.em.flush();
    rc.log.info({ user_id: userId, deletion_request_id: request.id }, 'account erased');
    return 'erased';
  });
}

/** Pending requests whose grace has ended get their erasure job again (one lost or failed for good); returns how many were enqueued. */
export async function enqueueOverdueErasures(app: AccountsServices, rc: RequestContext): Promise<number> {
  const due = await rc.em.find(DeletionRequest, { status: 'pending', scheduled_deletion_at: { $lte: app.clock.now() } }, { limit: 500 });
  let enqueued = 0;
  for (const request of due) {
    const { created } = await app.jobs.enqueue(erasureJob, { deletion_request_id: request.id }, { uniqueKey: erasureKey(request.user.id) });
    if (created) enqueued += 1;
  }
  return enqueued;
}

const defineJob = jobsFor<AccountsServices>();

/** Erases an account whose grace period has ended (scheduled by the request, withdrawn by a cancel). */
export const erasureJob = defineJob({
  type: 'accounts.erasure',
  payload: z.object({ deletion_request_id: z.uuid() }),
  retry: { attempts: 5, baseDelayMs: MINUTE },
  async handler(rc, { deletion_request_id }, app) {
    await eraseAccount(app, rc, deletion_request_id);
  },
});
