// verify-pin (document 1 §4.2): the PIN is checked by the accounts
// capability, which owns profiles; the profile token is signed here, where
// the signing keys are.
import { z } from 'zod';
import { verifyPinBody, verifyProfilePin } from '../accounts/index.ts';
import { bare } from '../http/route.ts';
import { uuid } from '../http/schemas.ts';
import { issueProfileToken } from './profile-tokens.ts';
import { defineAuthRoute as defineRoute } from './services.ts';

export const profileTokenResponse = z.object({ profile_token: z.string(), expires_in: z.number().int() });

export const verifyProfilePinRoute = defineRoute({
  method: 'post', path: '/v1/users/me/profiles/:profile_id/verify-pin', tags: ['Profiles'],
  access: { permission: 'profiles.read', resourceType: 'user' },
  summary: 'Verify a profile PIN',
  description: 'Returns a profile token (bare) valid 3600 seconds in this session, for switching to the PIN-protected profile; '
    + 'later calls present it in X-Profile-Token. A wrong PIN is 400 VALIDATION_ERROR on `pin`. '
    + 'After 5 wrong PINs within 15 minutes the profile answers 429 (with Retry-After), even to the right PIN, until the window ends; '
    + 'a right PIN spends nothing. A profile without a PIN is 409 CONFLICT. Only the profile\'s owner can verify its PIN.',
  params: z.strictObject({ profile_id: uuid() }),
  body: verifyPinBody,
  responses: { 200: bare(profileTokenResponse) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    const profile = await verifyProfilePin(app, rc, params.profile_id, body.pin);
    return issueProfileToken(app, rc, profile);
  },
});

export const profileTokenRoutes = [verifyProfilePinRoute];
