// The Account deletion request record of document 1 §2, also its presenter,
// and the body of the request's second form (§4.1).
import { z } from 'zod';
import { lineText, orNull, timestamp, timestampOrNull } from '../http/schemas.ts';
import { DELETION_REQUEST_STATUSES } from './deletion-request.entity.ts';

export const deletionRequestRecord = z.object({
  id: z.uuid(),
  status: z.enum(DELETION_REQUEST_STATUSES),
  reason: orNull(z.string()),
  requested_at: timestamp(),
  scheduled_deletion_at: timestamp().describe('When the account and its personal data are erased (30 days after the request)'),
  canceled_at: timestampOrNull(),
  completed_at: timestampOrNull(),
});

/** Document 1 §4.1, first form: no body is described; the password may confirm it (or a step-up token, in a header). */
export const deleteMeBody = z.strictObject({
  password: z.string().min(1).max(128).optional().describe('The current password of the account (or send X-Step-Up-Token)'),
});

/** Document 1 §4.1, second form: the current password, and an optional reason (part 8: at most 500 characters). */
export const deletionRequestBody = z.strictObject({
  password: z.string().min(1).max(128).describe('The current password of the account'),
  reason: lineText(500).nullable().optional(),
});
