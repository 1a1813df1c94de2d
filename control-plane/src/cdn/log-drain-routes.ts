// Log drains (document 3 §4.10): top-level list (status, sort, q) and create,
// read, partial update (If-Match), delete, pause and resume; per distribution,
// the drains that receive its logs and a create that includes it. The
// connectivity test (`POST /log-drains/{id}/test`), which operators may call.
import { bare, empty, page, reply } from '../http/route.ts';
import { findEndpoint } from './endpoint-service.ts';
import { distributionParams, idParams, listResources, scopedQuery, topLevelQuery } from './fields.ts';
import {
  createLogDrainBody, logDrainRecord, logDrainResource, MAX_DRAINS_PER_ENDPOINT, MAX_LOG_DRAINS, updateLogDrainBody, type CreateLogDrainInput,
} from './log-drain-record.ts';
import {
  createLogDrain, deleteLogDrain, DRAIN_TEST_TIMEOUT_MS, findLogDrain, listDistributionLogDrains, setLogDrainPaused, testLogDrain, updateLogDrain,
} from './log-drain-service.ts';
import { DRAIN_STATUSES, LogDrain } from './policies.entities.ts';
import { defineCdnRoute as defineRoute } from './services.ts';
import { z } from 'zod';

const tags = ['CDN: log drains'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const base = '/v1/cdn/log-drains';
const rules = 'name, destination_type (s3, datadog, elasticsearch, http, gcs) and destination_config (its members depend on the type) required; '
  + 'log_format json, ndjson (default) or w3c_extended; fields default to all. Credentials (access keys, api keys, passwords, header values, '
  + 'service account keys) are stored encrypted and always shown as "***". Refused with 422 INVALID_CONFIGURATION naming the member: an '
  + 'endpoint id that does not exist, a destination URL that is plain http, or whose host is or resolves to a private-use address, without '
  + 'allow_private_network (link-local, metadata and reserved addresses always). '
  + `At most ${MAX_LOG_DRAINS} drains, and ${MAX_DRAINS_PER_ENDPOINT} sending one endpoint's logs (those naming it and those for every endpoint): `
  + 'beyond, 409 LOG_DRAIN_LIMIT_REACHED (naming the endpoints) and nothing is stored.';

export const listLogDrainsRoute = defineRoute({
  method: 'get', path: base, tags, access: read,
  summary: 'List log drains',
  description: 'Newest first by default; `sort` by created_at, updated_at or name (`-` for descending); `q` searches names; `status` filters.',
  query: topLevelQuery(['created_at', 'updated_at', 'name'], { status: z.enum(DRAIN_STATUSES).optional() }),
  responses: { 200: page(logDrainRecord) },
  async handler({ query, rc }) {
    return listResources(rc, LogDrain, query.status ? { status: query.status } : {}, query);
  },
});

export const createLogDrainRoute = defineRoute({
  method: 'post', path: base, tags, access: write, idempotent: true,
  summary: 'Create a log drain',
  description: `${rules} endpoint_ids empty or left out: every endpoint. The drain starts \`active\`; a connectivity test is advised before production use. Audit-logged, credentials masked.`,
  body: createLogDrainBody,
  responses: { 201: bare(logDrainResource) },
  errors: ['INVALID_CONFIGURATION', 'LOG_DRAIN_LIMIT_REACHED'],
  async handler({ body, rc, app }) {
    const drain = await createLogDrain(app, rc, body as CreateLogDrainInput);
    return reply.created(drain, `${base}/${drain.id}`);
  },
});

export const listDistributionLogDrainsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/distributions/:id/log-drains', tags, access: read,
  summary: 'List the log drains of a distribution',
  description: 'The drains that receive its access logs: those whose endpoint_ids name it and those for every endpoint (empty endpoint_ids); oldest first.',
  params: distributionParams, query: scopedQuery(),
  responses: { 200: page(logDrainRecord) },
  async handler({ params, query, rc }) {
    await findEndpoint(rc, params.id);
    return listDistributionLogDrains(rc, params.id, query);
  },
});

export const createDistributionLogDrainRoute = defineRoute({
  method: 'post', path: '/v1/cdn/distributions/:id/log-drains', tags, access: write, idempotent: true,
  summary: 'Create a log drain for a distribution',
  description: `${rules} The distribution is added to endpoint_ids (alone when none are given). Audit-logged, credentials masked.`,
  params: distributionParams, body: createLogDrainBody,
  responses: { 201: bare(logDrainResource) },
  errors: ['INVALID_CONFIGURATION', 'LOG_DRAIN_LIMIT_REACHED'],
  async handler({ params, body, rc, app }) {
    await findEndpoint(rc, params.id);
    const drain = await createLogDrain(app, rc, body as CreateLogDrainInput, params.id);
    return reply.created(drain, `${base}/${drain.id}`);
  },
});

export const readLogDrainRoute = defineRoute({
  method: 'get', path: `${base}/:id`, tags, access: read,
  summary: 'Read a log drain', description: 'Credentials show as "***". With a strong ETag for If-Match.',
  params: idParams,
  responses: { 200: bare(logDrainResource) },
  async handler({ params, rc }) {
    return findLogDrain(rc, params.id);
  },
});

export const updateLogDrainRoute = defineRoute({
  method: 'patch', path: `${base}/:id`, tags, access: write,
  summary: 'Update a log drain',
  description: 'Partial: only sent fields change; destination_type cannot change. destination_config replaces the stored one whole and is checked '
    + 'against the drain\'s type; a credential (or header value) sent as "***" keeps its stored value, so what a read shows can be sent back, '
    + 'but only while the destination stays where it is: a change of url, endpoint_url, site, bucket or region needs every credential in clear '
    + '(422 INVALID_CONFIGURATION naming each one sent as "***"; nothing changes). '
    + `fields and endpoint_ids replace the lists. With a stale If-Match: 412, nothing changes. ${rules} Audit-logged, credentials masked.`,
  params: idParams, body: updateLogDrainBody,
  ifMatch: ({ params, rc }) => findLogDrain(rc, params.id),
  responses: { 200: bare(logDrainResource) },
  errors: ['INVALID_CONFIGURATION', 'LOG_DRAIN_LIMIT_REACHED'],
  async handler({ params, body, rc, app }) {
    return updateLogDrain(app, rc, params.id, body);
  },
});

export const deleteLogDrainRoute = defineRoute({
  method: 'delete', path: `${base}/:id`, tags, access: write,
  summary: 'Delete a log drain', description: 'Stops delivery and removes the configuration with its credentials. Audit-logged.',
  params: idParams,
  responses: { 204: empty },
  async handler({ params, rc }) {
    await deleteLogDrain(rc, params.id);
    return reply.noContent();
  },
});

const pauseOrResume = (paused: boolean) => defineRoute({
  method: 'post', path: `${base}/:id/${paused ? 'pause' : 'resume'}`, tags, access: write,
  summary: paused ? 'Pause a log drain' : 'Resume a log drain',
  description: paused
    ? 'active (or error) → paused: delivery is suspended, the configuration kept. A paused drain is answered unchanged. Audit-logged.'
    : 'paused (or error) → active, last_error cleared: delivery starts again. An active drain is answered unchanged. Audit-logged.',
  params: idParams,
  responses: { 200: bare(logDrainResource) },
  async handler({ params, rc }) {
    return setLogDrainPaused(rc, params.id, paused);
  },
});

export const testLogDrainRoute = defineRoute({
  method: 'post', path: `${base}/:id/test`, tags, access: { permission: 'cdn.log_drains.test' },
  summary: 'Test a log drain',
  description: `Sends one synthetic access record (path /log-drain-test, user agent log-drain-test/1) to the destination now, with the client the edge `
    + `agents use and the origins' SSRF rules at dial time, and answers bare \`{success, latency_ms, error}\` (error empty on success; it never `
    + `carries a credential). At most ${DRAIN_TEST_TIMEOUT_MS / 1000} s. Production delivery is untouched, whatever the drain's status. Operators may call it. `
    + 'At most 30 tests a minute per caller.',
  params: idParams,
  rateLimits: [{ name: 'log-drain-test', limit: 30, windowSeconds: 60, by: 'caller' }],
  responses: { 200: bare(z.object({ success: z.boolean(), latency_ms: z.number().int(), error: z.string() })) },
  async handler({ params, rc, app }) {
    return testLogDrain(app, rc, params.id);
  },
});

export const logDrainRoutes = [
  listLogDrainsRoute, createLogDrainRoute, listDistributionLogDrainsRoute, createDistributionLogDrainRoute, readLogDrainRoute, updateLogDrainRoute,
  deleteLogDrainRoute, pauseOrResume(true), pauseOrResume(false), testLogDrainRoute,
];
