// CDN admin users (document 3 §4.11; DESIGN.md §5, §6): list, create (an
// invitation), read, update (If-Match), deactivate and reactivate under
// /v1/cdn/admin/users. Single records are bare, lists `{data, meta}`.
// Administrators only (cdn.admin_users.manage); writes need a signed-in person.
import { z } from 'zod';
import { defineAuthRoute as defineRoute } from '../auth/index.ts';
import { bare, page, reply } from '../http/route.ts';
import { freeTextQuery, pageQuery, sortParam, uuid } from '../http/schemas.ts';
import { ADMIN_USER_STATUSES, adminUserRecord, adminUserResource, createAdminUserBody, presentAdminUser, updateAdminUserBody } from './admin-user-record.ts';
import {
  createAdminUser, deactivateAdminUser, findAdminUser, listAdminUsers, reactivateAdminUser, updateAdminUser, type AdminUser,
} from './admin-user-service.ts';
import { CDN_ROLES } from './cdn-roles.ts';

const tags = ['CDN: admin users'];
const manage = { permission: 'cdn.admin_users.manage' } as const;
const userParams = z.strictObject({ user_id: uuid() });
const present = ({ user, roles }: AdminUser) => presentAdminUser(user, roles);
const superadminRule = 'Only a superadmin may create, change, deactivate or reactivate a superadmin or grant that role (403 otherwise).';
const peopleOnly = 'Needs a signed-in administrator: API tokens get 403.';

export const listAdminUsersRoute = defineRoute({
  method: 'get', path: '/v1/cdn/admin/users', tags, access: manage,
  summary: 'List CDN admin users',
  description: 'Platform users holding a CDN role (viewer, operator, admin, superadmin), newest first by default. `role` matches the role shown (the most '
    + 'privileged CDN role held). `q` searches display names and e-mail addresses (whole words, a full address or its domain, web-search syntax).',
  query: pageQuery({
    q: freeTextQuery(),
    role: z.enum(CDN_ROLES).optional(),
    status: z.enum(ADMIN_USER_STATUSES).optional(),
    sort: sortParam(['created_at', 'email'], '-created_at'),
  }),
  responses: { 200: page(adminUserRecord) },
  async handler({ query, rc }) {
    const found = await listAdminUsers(rc, query);
    return { items: found.items.map(present), meta: found.meta };
  },
});

export const createAdminUserRoute = defineRoute({
  method: 'post', path: '/v1/cdn/admin/users', tags, access: manage,
  summary: 'Create (invite) a CDN admin user',
  description: 'A new address gets an account and an invitation e-mail whose link (valid 7 days, once) sets the password; until then the user cannot log in '
    + '(status `invited`). An address whose account its owner holds (address confirmed, a password set) is given the role (and told so) instead. '
    + 'An account that was registered but never confirmed, or has no password, is invited like a new address: its password is removed and its '
    + 'sessions end, since anyone can register an address. One that is already a CDN admin user is a 409. '
    + `${superadminRule} ${peopleOnly} Send an Idempotency-Key to retry safely. Audit-logged.`,
  body: createAdminUserBody,
  idempotent: true,
  responses: { 201: bare(adminUserResource) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    const created = await createAdminUser(app, rc, body);
    return reply.created(present(created), `/v1/cdn/admin/users/${created.user.id}`);
  },
});

export const readAdminUserRoute = defineRoute({
  method: 'get', path: '/v1/cdn/admin/users/:user_id', tags, access: manage,
  summary: 'Read a CDN admin user', description: 'A user who holds no CDN role is a 404 here.',
  params: userParams,
  responses: { 200: bare(adminUserResource) },
  async handler({ params, rc }) {
    return present(await findAdminUser(rc.em, params.user_id));
  },
});

export const updateAdminUserRoute = defineRoute({
  method: 'patch', path: '/v1/cdn/admin/users/:user_id', tags, access: manage,
  summary: 'Update a CDN admin user',
  description: 'Partial: display_name (null clears it) and role (replaces the CDN role held; takes effect on the next request). With If-Match, a stale ETag is a 412 '
    + `and nothing changes. Nobody changes their own role, and the last active superadmin keeps it (409). ${superadminRule} ${peopleOnly} Audit-logged.`,
  params: userParams,
  body: updateAdminUserBody,
  ifMatch: async ({ params, rc }) => (await findAdminUser(rc.em, params.user_id)).user,
  responses: { 200: bare(adminUserResource) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc }) {
    return present(await updateAdminUser(rc, params.user_id, body));
  },
});

export const deactivateAdminUserRoute = defineRoute({
  method: 'post', path: '/v1/cdn/admin/users/:user_id/deactivate', tags, access: manage,
  summary: 'Deactivate a CDN admin user',
  description: 'Suspends the account: every session ends and its access tokens are refused at once; login answers 403 ACCOUNT_SUSPENDED. Reversible. '
    + `Nobody deactivates themselves, an already deactivated user, or the last active superadmin (409). ${superadminRule} ${peopleOnly} Audit-logged.`,
  params: userParams,
  responses: { 200: bare(adminUserResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    return present(await deactivateAdminUser(app, rc, params.user_id));
  },
});

export const reactivateAdminUserRoute = defineRoute({
  method: 'post', path: '/v1/cdn/admin/users/:user_id/reactivate', tags, access: manage,
  summary: 'Reactivate a CDN admin user',
  description: `Reinstates a deactivated account (409 otherwise); the user logs in again. ${superadminRule} ${peopleOnly} Audit-logged.`,
  params: userParams,
  responses: { 200: bare(adminUserResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc }) {
    return present(await reactivateAdminUser(rc, params.user_id));
  },
});

export const adminUserRoutes = [listAdminUsersRoute, createAdminUserRoute, readAdminUserRoute, updateAdminUserRoute, deactivateAdminUserRoute, reactivateAdminUserRoute];
