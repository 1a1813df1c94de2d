// The current user (document 1 §4.1): read and update. (Changing the
// password is auth's: it ends sessions and issues tokens.)
import { z } from 'zod';
import { data, routesFor } from '../http/route.ts';
import { lineText } from '../http/schemas.ts';
import type { CoreServices } from '../core/services.ts';
import { countryCodeField, localeField, phoneField, timezoneField, userResource, withRoles } from './user-record.ts';
import { currentUser, currentUserRow, updateCurrentUser } from './user-service.ts';

const defineRoute = routesFor<CoreServices>();
const tags = ['Account'];

export const readMeRoute = defineRoute({
  method: 'get', path: '/v1/users/me', tags,
  access: { permission: 'users.read', resourceType: 'user', allowUnverified: true, allowPendingDeletion: true },
  summary: 'Read the current user',
  responses: { 200: data(userResource) },
  async handler({ rc }) {
    // The guard has just read the caller's row and roles from storage for this request.
    return withRoles(await currentUserRow(rc), rc.actor!.roles);
  },
});

export const updateMeRoute = defineRoute({
  method: 'patch', path: '/v1/users/me', tags,
  access: { permission: 'users.update', resourceType: 'user' },
  summary: 'Update the current user',
  body: z.strictObject({
    display_name: lineText(100).nullable().optional(),
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
  ifMatch: ({ rc }) => currentUser(rc),
  responses: { 200: data(userResource) },
  async handler({ body, rc }) {
    return withRoles(await updateCurrentUser(rc, body), rc.actor!.roles);
  },
});

export const meRoutes = [readMeRoute, updateMeRoute];
