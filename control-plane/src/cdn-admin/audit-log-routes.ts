// The CDN audit log (document 3 §2, §4.11): list with filters and read one
// entry, under /v1/cdn/audit-logs. Only entries about CDN resources and CDN
// administration are shown (audit-scope.ts). Reading needs cdn.audit.read.
import { z } from 'zod';
import { AuditEntry } from '../audit/audit-entry.entity.ts';
import { defineAuthRoute as defineRoute } from '../auth/index.ts';
import { found } from '../http/errors.ts';
import { paginate } from '../http/paging.ts';
import { bare, page } from '../http/route.ts';
import { orNull, pageQuery, queryDateTime, sortParam, timestamp, uuid } from '../http/schemas.ts';
import { CDN_AUDIT_RESOURCE_TYPES } from './audit-scope.ts';

const tags = ['CDN: audit log'];
const read = { permission: 'cdn.audit.read' } as const;

export const auditEntryRecord = z.object({
  id: z.uuid(),
  action: z.string().describe('`resource.verb`, e.g. origin.created'),
  actor_id: orNull(z.string()).describe('The user or API token that acted; null for the platform itself'),
  actor_type: z.string().describe('user, api_token or system'),
  actor_role: orNull(z.string()).describe('The most privileged role the actor held when acting'),
  resource_type: z.string(),
  resource_id: orNull(z.string()),
  ip_address: orNull(z.string()),
  user_agent: orNull(z.string()),
  request_id: orNull(z.string()),
  metadata: z.record(z.string(), z.unknown()).describe('What changed (`changes`: field → {from, to}, secrets masked), the reason, and details of the operation'),
  created_at: timestamp(),
});

/** `origin.created`, or a prefix ending in `*` (`origin.*`, `api_token.rot*`); `*` alone is every action. */
const actionPattern = () => z.string().min(1).max(200)
  .regex(/^[A-Za-z0-9_.:-]*\*?$/, 'Must be an action (origin.created) or a prefix ending in * (origin.*)');

/** A LIKE pattern matching values that start with `prefix` (its own %, _ and \ taken literally). */
const startsWith = (prefix: string) => `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export const listAuditLogsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/audit-logs', tags, access: read,
  summary: 'List the CDN audit log',
  description: 'Entries about CDN resources and CDN administration (admin users, API tokens), newest first by default. `action` is exact or a prefix '
    + 'glob ending in `*` (`origin.*`); `from` and `to` bound created_at, both inclusive (from must not be after to). Account-side entries are not listed.',
  query: pageQuery({
    actor_id: uuid().optional(),
    resource_type: z.string().max(100).regex(/^[a-z][a-z0-9_]*$/, 'Must be a resource type such as origin or api_token').optional(),
    resource_id: z.string().max(100).regex(/^[A-Za-z0-9_.:-]+$/, 'Must be a resource id (a UUID for most resources)').optional(),
    action: actionPattern().optional(),
    from: queryDateTime().optional(),
    to: queryDateTime().optional(),
    sort: sortParam(['created_at', 'action'], '-created_at'),
  }).superRefine((q, ctx) => {
    if (q.from && q.to && q.from > q.to) ctx.addIssue({ code: 'custom', path: ['from'], message: 'Must not be after to' });
  }),
  responses: { 200: page(auditEntryRecord) },
  async handler({ query, rc }) {
    const types = query.resource_type ? CDN_AUDIT_RESOURCE_TYPES.filter((type) => type === query.resource_type) : [...CDN_AUDIT_RESOURCE_TYPES];
    const where: Record<string, unknown> = { resource_type: { $in: types } };
    if (query.actor_id) where.actor_id = query.actor_id;
    if (query.resource_id) where.resource_id = query.resource_id;
    if (query.action) where.action = query.action.endsWith('*') ? { $like: startsWith(query.action.slice(0, -1)) } : query.action;
    if (query.from || query.to) where.created_at = { ...(query.from ? { $gte: query.from } : {}), ...(query.to ? { $lte: query.to } : {}) };
    return paginate(rc.em, AuditEntry, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
  },
});

export const readAuditLogRoute = defineRoute({
  method: 'get', path: '/v1/cdn/audit-logs/:audit_log_id', tags, access: read,
  summary: 'Read a CDN audit entry', description: 'An entry outside the CDN audit log (account-side) is a 404 here.',
  params: z.strictObject({ audit_log_id: uuid() }),
  responses: { 200: bare(auditEntryRecord) },
  async handler({ params, rc }) {
    return found(await rc.em.findOne(AuditEntry, { id: params.audit_log_id, resource_type: { $in: [...CDN_AUDIT_RESOURCE_TYPES] } }), 'Audit entry');
  },
});

export const auditLogRoutes = [listAuditLogsRoute, readAuditLogRoute];
