// Request and response schemas of document 2, with the limits of document 1 part 8.
import { z } from 'zod';
import { countryCodeField, localeField, phoneField } from '../accounts/index.ts';
import { lineText, timestamp, withExample } from '../http/schemas.ts';
import { newPasswordSchema, passwordSchema } from './primitives/password.ts';

export const emailField = () => z.email({ message: 'Must be an e-mail address' }).max(254);
export const totpCodeField = () => z.string().regex(/^\d{6,8}$/, 'Must be 6 to 8 digits');
export const recoveryCodeField = () => z.string().min(8).max(32);

export const registerBody = withExample(z.strictObject({
  email: emailField(),
  password: passwordSchema,
  display_name: lineText(100).optional(),
  phone: phoneField().optional(),
  locale: localeField().optional(),
  country_code: countryCodeField().optional(),
  accept_terms: z.literal(true, { message: 'Must be true: the terms must be accepted' }),
}), { email: 'ada@example.com', password: 'Change-me-123', display_name: 'Ada Lovelace', locale: 'en-GB', country_code: 'GB', accept_terms: true });

export const loginBody = withExample(z.strictObject({
  email: emailField(),
  password: z.string().min(1).max(1024),
  totp_code: totpCodeField().optional(),
  recovery_code: recoveryCodeField().optional(),
  device_type: z.string().max(30).regex(/^[a-z_]+$/).optional(),
  platform: lineText(50).optional(),
}), { email: 'ada@example.com', password: 'Change-me-123', device_type: 'web', platform: 'Firefox on Linux' });

export const emailOnlyBody = withExample(z.strictObject({ email: emailField() }), { email: 'ada@example.com' });
/**
 * Verification: the token, and who set the account's password showing it was them (`password`), or a
 * new password replacing it (`new_password`). See auth-service.ts verifyEmail.
 */
export const verifyEmailBody = z.strictObject({
  token: z.string().min(16).max(512),
  password: z.string().min(1).max(1024).optional().describe('Optional: the password chosen at registration, checked when given (400 when it is not)'),
  new_password: newPasswordSchema.optional().describe('Optional: replaces the password chosen at registration'),
}).superRefine((body, ctx) => {
  if (body.password !== undefined && body.new_password !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['new_password'], message: 'Give either password or new_password, not both' });
  }
});
export const resetPasswordBody = z.strictObject({
  token: z.string().min(16).max(512),
  new_password: newPasswordSchema,
  // Required when the account has MFA (401 MFA_REQUIRED without).
  totp_code: totpCodeField().optional(),
  recovery_code: recoveryCodeField().optional(),
});
export const totpBody = z.strictObject({ totp_code: totpCodeField() });
export const changePasswordBody = z.strictObject({ current_password: z.string().min(1).max(1024), new_password: newPasswordSchema });

export const accessTokenResponse = z.object({ access_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.number().int() });
export const tokenSetResponse = accessTokenResponse.extend({ refresh_token: z.string(), scope: z.string(), id_token: z.string() });
export const stepUpResponse = z.object({ step_up_token: z.string(), expires_in: z.number().int() });
export const recoveryCodesResponse = z.object({ codes: z.array(z.string()), generated_at: timestamp() });
export const messageRecord = z.object({ message: z.string() });

export const sessionRecord = z.object({
  session_id: z.uuid(),
  device_type: z.string(),
  platform: z.string().nullable(),
  ip_address_hint: z.string().nullable(),
  is_current: z.boolean(),
  created_at: timestamp(),
  last_active_at: timestamp(),
});
