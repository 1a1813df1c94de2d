// Purge (document 3 §4.1 "Submit purge for endpoint", §4.5; DESIGN.md §6):
// submit at the top level (`POST /cache/purge`: the distribution named in the
// body, found by the host of full URLs, or every endpoint), per endpoint and
// per distribution; read; history newest first, top
// level and per distribution. Operators may purge (cdn.purge); each caller
// has a budget of PURGES_PER_MINUTE submissions.
import { z } from 'zod';
import { bare, page, reply } from '../http/route.ts';
import { pageQuery, uuid } from '../http/schemas.ts';
import { distributionAlias } from './endpoint-routes.ts';
import { distributionParams, idParams } from './fields.ts';
import { PURGE_TYPES, WORK_STATUSES } from './purge-entity.ts';
import { presentPurge, purgeBody, purgeRecord, topLevelPurgeBody } from './purge-record.ts';
import { findPurge, listPurges, submitPurge, submitTopLevelPurge } from './purge-service.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

const tags = ['CDN: purge'];
export const PURGES_PER_MINUTE = 120;
const purgeAccess = { permission: 'cdn.purge' } as const;
const rateLimits = [{ name: 'cdn-purge', limit: PURGES_PER_MINUTE, windowSeconds: 60, by: 'caller' as const, leased: true }];
const rules = 'purge_type is required (`type` is its deprecated alias; both sent and different → 400). path and wildcard purges need `paths` '
  + '(1..500 absolute paths of at most 2048 characters, applying to every hostname of the endpoint; wildcard paths are globs) and refuse `tags`; tag purges need '
  + '`tags` (1..100 of at most 256 characters) and refuse `paths`; all takes neither. Answers 202 with the request `pending`: the edge nodes apply it '
  + `asynchronously in sequence order (poll GET /v1/cdn/purge/{purge_id}). At most ${PURGES_PER_MINUTE} submissions per caller and minute. Audit-logged.`;
const accepted = ({ purge, replayed }: Awaited<ReturnType<typeof submitPurge>>) =>
  reply.accepted(presentPurge(purge), { location: `/v1/cdn/purge/${purge.id}`, ...(replayed ? { 'idempotent-replayed': 'true' } : {}) });
const historyQuery = pageQuery({ status: z.enum(WORK_STATUSES).optional(), type: z.enum(PURGE_TYPES).optional() });
const presentPage = (found: { items: Parameters<typeof presentPurge>[0][]; meta: any }) => ({ items: found.items.map(presentPurge), meta: found.meta });

const submitTopLevel = defineRoute({
  method: 'post', path: '/v1/cdn/cache/purge', tags, access: purgeAccess, idempotent: 'statement', rateLimits,
  summary: 'Submit a purge',
  description: 'distribution_id names the distribution (endpoint) to purge. Without it, path and wildcard purges may give full URLs in paths '
    + '(`https://<host>/path`, a query may follow for path purges): the distribution is the endpoint serving their host, its hostname or a validated custom '
    + 'domain, and every URL must be that endpoint\'s (400 naming the path otherwise; full URLs and paths are not mixed); with neither distribution_id '
    + `nor URLs (plain paths, tags, or all) the purge applies to every endpoint, and its distribution_id reads null. ${rules}`,
  body: topLevelPurgeBody,
  responses: { 202: bare(purgeRecord) },
  async handler({ body, rc, app, idempotency }) {
    return accepted(await submitTopLevelPurge(app, rc, body, idempotency));
  },
});

const submitForEndpoint = defineRoute({
  method: 'post', path: '/v1/cdn/endpoints/:id/purge', tags, access: purgeAccess, idempotent: 'statement', rateLimits,
  summary: 'Submit a purge for an endpoint', description: `${rules} \`/v1/cdn/distributions/{id}/purge\` answers alike.`,
  params: idParams, body: purgeBody,
  responses: { 202: bare(purgeRecord) },
  async handler({ params, body, rc, app, idempotency }) {
    return accepted(await submitPurge(app, rc, params.id, body, idempotency));
  },
});

const readPurge = defineRoute({
  method: 'get', path: '/v1/cdn/purge/:purge_id', tags, access: { permission: 'cdn.read' },
  summary: 'Read a purge request', description: 'Its status and how many edge nodes have applied it.',
  params: z.strictObject({ purge_id: uuid() }),
  responses: { 200: bare(purgeRecord) },
  async handler({ params, rc }) {
    return presentPurge(await findPurge(rc, params.purge_id));
  },
});

const history = defineRoute({
  method: 'get', path: '/v1/cdn/purge', tags, access: { permission: 'cdn.read' },
  summary: 'Purge history', description: 'Newest first (by sequence); filters status and type.',
  query: historyQuery,
  responses: { 200: page(purgeRecord) },
  async handler({ query, rc }) {
    return presentPage(await listPurges(rc, null, query, query));
  },
});

const distributionHistory = defineRoute({
  method: 'get', path: '/v1/cdn/distributions/:id/purge', tags, access: { permission: 'cdn.read' },
  summary: 'Purge history of a distribution', description: 'Newest first (by sequence); filters status and type.',
  params: distributionParams, query: historyQuery,
  responses: { 200: page(purgeRecord) },
  async handler({ params, query, rc }) {
    return presentPage(await listPurges(rc, params.id, query, query));
  },
});

export const purgeRoutes = [submitTopLevel, submitForEndpoint, distributionAlias(submitForEndpoint), readPurge, history, distributionHistory];
