// Account deletion (document 1 §3, §4.1; DESIGN.md §6 `POST|DELETE
// /v1/users/me/deletion-request`, `DELETE /v1/users/me` is the first form).
import { bare, data, empty, reply } from '../http/route.ts';
import { STEP_UP_TOKEN_HEADER, stepUpTokenHeader } from '../http/headers.ts';
import { deleteMeBody, deletionRequestBody, deletionRequestRecord } from './deletion-request-record.ts';
import { cancelAccountDeletion, latestDeletionRequest, requestAccountDeletion } from './deletion-service.ts';
import { defineAccountsRoute } from './services.ts';

const tags = ['Account'];
const grace = 'The account and its personal data are erased 30 days later (GDPR Art. 17); live subscriptions are canceled at once, without refund. '
  + 'Until then the owner may sign in, read the account, export their data and cancel; other operations answer 403 ACCOUNT_PENDING_DELETION. '
  + 'While a request is pending, asking again answers the pending request unchanged.';

const deletionLimit = { name: 'account-deletion', limit: 10, windowSeconds: 3600, by: 'caller' } as const;

export const deleteMeRoute = defineAccountsRoute({
  method: 'delete', path: '/v1/users/me', tags,
  access: { permission: 'users.delete', resourceType: 'user', allowUnverified: true, allowPendingDeletion: true },
  summary: 'Initiate the deletion of the current user\'s account (first form)',
  description: `${grace} The owner confirms it beyond the access token: with a step-up token of this session in X-Step-Up-Token (accounts with MFA), `
    + 'or with the account\'s password in the body `{"password": "..."}`; without either, 403 STEP_UP_REQUIRED and nothing changes. '
    + 'A wrong password is 400 on `password`; the password and step-up attempts share the second form\'s 10 an hour.',
  body: deleteMeBody,
  headers: [stepUpTokenHeader],
  responses: { 202: bare(deletionRequestRecord) },
  errors: ['STEP_UP_REQUIRED'],
  rateLimits: [deletionLimit],
  async handler({ body, rc, ctx, app }) {
    return reply.accepted((await requestAccountDeletion(app, rc, { form: 'first', password: body.password, stepUpToken: ctx.get(STEP_UP_TOKEN_HEADER) })).request);
  },
});

export const requestDeletionRoute = defineAccountsRoute({
  method: 'post', path: '/v1/users/me/deletion-request', tags,
  access: { permission: 'users.delete', resourceType: 'user', allowUnverified: true, allowPendingDeletion: true },
  summary: 'Request the deletion of the current user\'s account (second form: password and reason)',
  description: `${grace} A wrong password is 400 on \`password\` and changes nothing; at most 10 requests an hour.`,
  body: deletionRequestBody,
  responses: { 202: bare(deletionRequestRecord) },
  rateLimits: [deletionLimit],
  async handler({ body, rc, app }) {
    return reply.accepted((await requestAccountDeletion(app, rc, { form: 'second', password: body.password, reason: body.reason ?? null })).request);
  },
});

export const readDeletionRoute = defineAccountsRoute({
  method: 'get', path: '/v1/users/me/deletion-request', tags,
  access: { permission: 'users.read', resourceType: 'user', allowUnverified: true, allowPendingDeletion: true },
  summary: 'Read the current user\'s latest deletion request',
  description: 'Pending (with its `scheduled_deletion_at`), canceled or completed; 404 when none was made.',
  responses: { 200: data(deletionRequestRecord) },
  async handler({ rc }) {
    return latestDeletionRequest(rc);
  },
});

export const cancelDeletionRoute = defineAccountsRoute({
  method: 'delete', path: '/v1/users/me/deletion-request', tags,
  access: { permission: 'users.delete', resourceType: 'user', allowUnverified: true, allowPendingDeletion: true },
  summary: 'Cancel the pending deletion of the current user\'s account',
  description: 'During the grace period: full access is restored and the erasure is withdrawn (audit-logged). Canceled subscriptions stay canceled. 404 without a pending request.',
  responses: { 204: empty },
  async handler({ rc, app }) {
    await cancelAccountDeletion(app, rc);
    return reply.noContent();
  },
});

export const deletionRoutes = [deleteMeRoute, requestDeletionRoute, readDeletionRoute, cancelDeletionRoute];
