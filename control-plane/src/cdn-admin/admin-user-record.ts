// The Admin user record of document 3 §2 and its request bodies. A CDN admin
// user is a platform user (app_user) holding a CDN role: the record shows its
// most privileged CDN role, `deactivated` for a suspended account and
// `invited` for one whose owner has not set a password yet.
import { z } from 'zod';
import type { User } from '../accounts/index.ts';
import { emailField } from '../auth/index.ts';
import { versioned } from '../http/route.ts';
import { lineText, orNull, timestamp, timestampOrNull, withExample } from '../http/schemas.ts';
import { CDN_ROLES, cdnRoleOf } from './cdn-roles.ts';

export const ADMIN_USER_STATUSES = ['active', 'invited', 'deactivated'] as const;

export const adminUserRecord = z.object({
  id: z.uuid(),
  email: z.string(),
  display_name: orNull(z.string()),
  role: z.enum(CDN_ROLES).describe('The most privileged CDN role the user holds'),
  status: z.enum(ADMIN_USER_STATUSES).describe('invited: the person has not accepted the invitation (no password of theirs, address not confirmed), '
    + 'so cannot log in yet; deactivated: cannot log in, sessions ended (the account is suspended)'),
  last_login_at: timestampOrNull(),
  created_at: timestamp(),
  updated_at: timestamp(),
});

export const adminUserResource = versioned(adminUserRecord);

/** The admin-user status of an account: suspended → deactivated; no password of the owner's or address unconfirmed → invited. */
export function adminUserStatus(user: Pick<User, 'status' | 'password_hash'>): (typeof ADMIN_USER_STATUSES)[number] {
  if (user.status === 'suspended') return 'deactivated';
  return user.status === 'pending_verification' || !user.password_hash ? 'invited' : 'active';
}

/** The value a route hands over: the user's fields with its CDN role and status as the API shows them. */
export function presentAdminUser(user: User, roles: readonly string[]) {
  return {
    id: user.id, email: user.email, display_name: user.display_name, role: cdnRoleOf(roles)!,
    status: adminUserStatus(user),
    last_login_at: user.last_login_at, created_at: user.created_at, updated_at: user.updated_at, version: user.version,
  };
}

export const createAdminUserBody = withExample(z.strictObject({
  email: emailField(),
  display_name: lineText(100).optional(),
  role: z.enum(CDN_ROLES),
}), { email: 'grace@example.com', display_name: 'Grace Hopper', role: 'operator' });
export type CreateAdminUserInput = z.output<typeof createAdminUserBody>;

export const updateAdminUserBody = z.strictObject({
  display_name: lineText(100).nullable().optional().describe('null clears it'),
  role: z.enum(CDN_ROLES).optional(),
});
export type UpdateAdminUserInput = z.output<typeof updateAdminUserBody>;
