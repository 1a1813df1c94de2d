// The endpoint the e-mailed invitation link's page posts to
// (pages/assets/pages.js: POST /v1/auth/invitation/accept {token, new_password}).
import { z } from 'zod';
import { defineAuthRoute as defineRoute, messageRecord, newPasswordSchema } from '../auth/index.ts';
import { data } from '../http/route.ts';
import { acceptInvitation } from './invitation-service.ts';

export const acceptInvitationRoute = defineRoute({
  method: 'post', path: '/v1/auth/invitation/accept', tags: ['Authentication'], access: 'public',
  summary: 'Accept an invitation and set the password',
  description: 'With the token from the invitation e-mail (valid 7 days, once) and a new password, the invited CDN admin user becomes active and can log in. '
    + 'An invalid, spent or expired token is a 400 on `token`; a deactivated invitee gets 403 ACCOUNT_SUSPENDED and the link stays usable after reactivation.',
  body: z.strictObject({ token: z.string().min(16).max(512), new_password: newPasswordSchema }),
  rateLimits: [{ name: 'invitation-accept:ip', limit: 20, windowSeconds: 3600, by: 'ip' }],
  responses: { 200: data(messageRecord) },
  errors: ['ACCOUNT_SUSPENDED'],
  async handler({ body, rc, app }) {
    await acceptInvitation(app, rc, body);
    return { message: 'Invitation accepted. Sign in with your e-mail address and the password you chose.' };
  },
});
