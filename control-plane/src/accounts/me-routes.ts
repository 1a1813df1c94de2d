// The current user (document 1 §4.1): read, update, change password.
import { z } from 'zod';
import { currentCaller } from '../auth/access-control.ts';
import { changePassword } from '../auth/auth-service.ts';
import { changePasswordBody, countryCodeField, localeField, phoneField, tokenSetResponse } from '../auth/schemas.ts';
import { setRefreshCookie } from '../auth/cookies.ts';
import { assertIfMatch, etagFor } from '../http/etag.ts';
import { defineRoute, reply } from '../http/route.ts';
import { User } from './user.entity.ts';
import { presentUser, userRecord } from './user-presenter.ts';

const tags = ['Account'];

export const readMeRoute = defineRoute({
  method: 'get', path: '/v1/users/me', tags,
  access: { permission: 'users.read', resourceType: 'user', allowUnverified: true },
  summary: 'Read the current user',
  responses: { 200: z.object({ data: userRecord }) },
  async handler({ em, ctx }) {
    const caller = currentCaller(ctx);
    const user = await em.findOneOrFail(User, caller.id);
    // The guard has just read the caller's roles from storage for this request.
    return reply.data(presentUser(user, caller.roles), { etag: etagFor(user.id, user.version) });
  },
});

const timezoneField = () => z.string().max(64).refine((tz) => {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}, 'Must be an IANA time-zone name such as Europe/Paris');

export const updateMeRoute = defineRoute({
  method: 'patch', path: '/v1/users/me', tags,
  access: { permission: 'users.update', resourceType: 'user' },
  summary: 'Update the current user',
  body: z.strictObject({
    display_name: z.string().trim().min(1).max(100).nullable().optional(),
    phone: phoneField().nullable().optional(),
    locale: localeField().nullable().optional(),
    timezone: timezoneField().nullable().optional(),
    country_code: countryCodeField().nullable().optional(),
    preferred_language: localeField().nullable().optional(),
    notification_preferences: z.strictObject({
      payment: z.boolean().optional(),
      new_content: z.boolean().optional(),
      account_security: z.boolean().optional(),
      marketing: z.boolean().optional(),
    }).optional(),
  }),
  ifMatch: true,
  responses: { 200: z.object({ data: userRecord }) },
  async handler({ body, em, ctx }) {
    const caller = currentCaller(ctx);
    const user = await em.findOneOrFail(User, caller.id);
    assertIfMatch(ctx, etagFor(user.id, user.version));
    const { notification_preferences, ...fields } = body;
    if (fields.phone !== undefined && fields.phone !== user.phone) user.phone_verified = false;
    em.assign(user, fields);
    if (notification_preferences) user.notification_preferences = { ...user.notification_preferences, ...notification_preferences };
    await em.flush();
    return reply.data(presentUser(user, caller.roles), { etag: etagFor(user.id, user.version) });
  },
});

export const changePasswordRoute = defineRoute({
  method: 'post', path: '/v1/users/me/password', tags,
  access: { permission: 'users.update', resourceType: 'user' },
  summary: 'Change the password',
  description: 'Ends every other session; this session continues with the returned token set (the refresh token also comes as the cookie).',
  body: changePasswordBody,
  rateLimits: [{ name: 'change-password', limit: 10, windowSeconds: 3600, by: 'caller' }],
  responses: { 200: z.object({ data: tokenSetResponse }) },
  async handler({ body, em, ctx, app }) {
    const tokenSet = await changePassword(app, em, ctx, currentCaller(ctx), body.current_password, body.new_password);
    setRefreshCookie(ctx, app.config, tokenSet.refresh_token);
    return reply.data(tokenSet);
  },
});

export const meRoutes = [readMeRoute, updateMeRoute, changePasswordRoute];
