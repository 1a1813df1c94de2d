// Administration: users (document 1 §4.6). Every route needs a global admin permission.
import { z } from 'zod';
import { raw } from '@mikro-orm/core';
import { countryCodeField, User, USER_STATUSES, userResource, userSearchDocument, withRoles } from '../accounts/index.ts';
import { activeRolesByUser, defineAuthRoute as defineRoute } from '../auth/index.ts';
import { paginate } from '../http/paging.ts';
import { data, page } from '../http/route.ts';
import { freeTextQuery, lineText, pageQuery, queryDateTime, sortParam, uuid } from '../http/schemas.ts';
import { findUser, reinstateUser, suspendUser, updateUser } from './user-service.ts';

const tags = ['Administration: users'];
const userParams = z.strictObject({ user_id: uuid() });

/** A user with its current roles, as the user record wants it. */
async function withCurrentRoles(em: Parameters<typeof activeRolesByUser>[0], user: User) {
  return withRoles(user, (await activeRolesByUser(em, [user.id])).get(user.id) ?? []);
}

export const listUsersRoute = defineRoute({
  method: 'get', path: '/v1/admin/users', tags, access: { permission: 'admin.users.read' },
  summary: 'List users',
  description: 'Deleted accounts are excluded unless status=deleted is asked for. `q` is a full-text search of display names and e-mail addresses: '
    + 'whole words of either, a full address or its domain (`grace`, `grace.hopper@example.com`, `example.com`), in web-search syntax '
    + '(`"grace hopper"` for a phrase, `or`, `-word` to exclude); case does not matter.',
  query: pageQuery({
    q: freeTextQuery(),
    status: z.enum(USER_STATUSES).optional(),
    role: z.enum(['subscriber', 'partner', 'admin', 'superadmin']).optional(),
    country_code: countryCodeField().optional(),
    created_after: queryDateTime().optional(),
    created_before: queryDateTime().optional(),
    sort: sortParam(['created_at', 'email'], '-created_at'),
  }),
  responses: { 200: page(userResource) },
  async handler({ query, rc }) {
    const em = rc.em;
    const where: Record<string | symbol, unknown> = { status: query.status ?? { $ne: 'deleted' } };
    if (query.country_code) where.country_code = query.country_code;
    if (query.created_after || query.created_before) {
      where.created_at = { ...(query.created_after ? { $gte: query.created_after } : {}), ...(query.created_before ? { $lte: query.created_before } : {}) };
    }
    if (query.q) {
      // Full text over name and address (served by app_user_search_idx), in web-search syntax.
      const matches = raw<symbol>((alias) => `${userSearchDocument(alias)} @@ websearch_to_tsquery('simple', ?)`, [query.q]);
      where[matches] = [];
    }
    if (query.role) {
      const rows = await em.execute<{ user_id: string }[]>(
        `select user_id from user_role where role_name = ? and (expires_at is null or expires_at > now())`, [query.role]);
      where.id = { $in: rows.map((r) => r.user_id) };
    }
    const found = await paginate(em, User, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
    const roles = await activeRolesByUser(em, found.items.map((u) => u.id));
    return { items: found.items.map((u) => withRoles(u, roles.get(u.id) ?? [])), meta: found.meta };
  },
});

export const readUserRoute = defineRoute({
  method: 'get', path: '/v1/admin/users/:user_id', tags, access: { permission: 'admin.users.read' },
  summary: 'Read a user', params: userParams,
  responses: { 200: data(userResource) },
  async handler({ params, rc }) {
    return withCurrentRoles(rc.em, await findUser(rc.em, params.user_id));
  },
});

export const updateUserRoute = defineRoute({
  method: 'patch', path: '/v1/admin/users/:user_id', tags, access: { permission: 'admin.users.update' },
  summary: 'Change a user\'s status or roles',
  description: 'Granting or removing superadmin needs superadmin scope. Audit-logged with the acting admin.',
  params: userParams,
  body: z.strictObject({
    status: z.enum(['active', 'suspended']).optional(),
    roles: z.array(z.enum(['subscriber', 'partner', 'admin', 'superadmin'])).min(1).max(4).optional(),
  }),
  ifMatch: ({ params, rc }) => findUser(rc.em, params.user_id),
  responses: { 200: data(userResource) }, errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    return withCurrentRoles(rc.em, await updateUser(app, rc, params.user_id, body));
  },
});

export const suspendUserRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/suspend', tags, access: { permission: 'admin.users.suspend' },
  summary: 'Suspend a user',
  description: 'Immediate: every session ends and access tokens are refused at once. E-mails the user unless notify_user is false.',
  params: userParams,
  body: z.strictObject({ reason: lineText(500), notify_user: z.boolean().default(true) }),
  responses: { 200: data(userResource) }, errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    return withCurrentRoles(rc.em, await suspendUser(app, rc, params.user_id, body));
  },
});

export const reinstateUserRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/reinstate', tags, access: { permission: 'admin.users.suspend' },
  summary: 'Reinstate a suspended user',
  params: userParams,
  body: z.strictObject({ note: lineText(500, 0).optional() }),
  responses: { 200: data(userResource) }, errors: ['CONFLICT'],
  async handler({ params, body, rc }) {
    return withCurrentRoles(rc.em, await reinstateUser(rc, params.user_id, body.note ?? null));
  },
});

export const adminUserRoutes = [listUsersRoute, readUserRoute, updateUserRoute, suspendUserRoute, reinstateUserRoute];
