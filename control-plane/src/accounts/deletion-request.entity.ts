// A request to delete an account (document 1 §2 "Account deletion request",
// §3; GDPR Art. 17): pending during the 30-day grace period, then completed
// by the erasure job, or canceled by the user before. The row outlives the
// erasure (without its reason) as the record that the account was erased.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.entity.ts';

export const DELETION_REQUEST_STATUSES = ['pending', 'canceled', 'completed'] as const;
export type DeletionRequestStatus = (typeof DELETION_REQUEST_STATUSES)[number];

export const DeletionRequestSchema = defineEntity({
  name: 'DeletionRequest',
  tableName: 'account_deletion_request',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    status: p.enum(DELETION_REQUEST_STATUSES).default('pending'),
    reason: p.string().length(500).nullable(),
    requested_at: p.datetime(),
    scheduled_deletion_at: p.datetime(),
    canceled_at: p.datetime().nullable(),
    completed_at: p.datetime().nullable(),
  },
  indexes: [
    { name: 'account_deletion_request_user_idx', properties: ['user', 'requested_at'] },
    // One pending request per account, held by the database (and what the guard looks up on every request).
    {
      name: 'account_deletion_request_one_pending',
      expression: `create unique index "account_deletion_request_one_pending" on "account_deletion_request" ("user_id") where status = 'pending'`,
    },
    // The sweep: pending requests whose grace has ended.
    {
      name: 'account_deletion_request_due_idx',
      expression: `create index "account_deletion_request_due_idx" on "account_deletion_request" ("scheduled_deletion_at") where status = 'pending'`,
    },
  ],
});
export class DeletionRequest extends DeletionRequestSchema.class {}
DeletionRequestSchema.setClass(DeletionRequest);

/**
 * SQL true when the user (`alias`.id) has a pending deletion request: the
 * guard reads it with the user's row on every request (auth/access-control.ts).
 */
export function pendingDeletionSql(alias: string): string {
  return `exists (select 1 from account_deletion_request d where d.user_id = ${alias}.id and d.status = 'pending')`;
}
