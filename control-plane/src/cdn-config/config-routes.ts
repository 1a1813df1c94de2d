// Configuration versions (document 3 §4.12): list and read (viewers), validate
// (a draft: admins), publish and roll back (Idempotency-Key; admins:
// cdn.config.publish). Each reply carries propagation_status.
import { bare, page, reply } from '../http/route.ts';
import { idParams } from '../cdn/index.ts';
import { configVersionRecord, configVersionResource, publishBody, rollbackBody, validateBody, versionListQuery } from './config-record.ts';
import {
  CONFIG_LOCK_TIMEOUT_MS, findVersion, listVersions, publishConfiguration, rollbackConfiguration, validateConfiguration, withPropagation,
} from './config-service.ts';
import { defineConfigRoute as defineRoute } from './services.ts';

const tags = ['CDN: configuration versions'];
const base = '/v1/cdn/config';
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const publish = { permission: 'cdn.config.publish' } as const;
const busy = `409 CONFLICT when configuration writes keep the configuration locked for more than ${CONFIG_LOCK_TIMEOUT_MS / 1000} s.`;

const created = <V extends { id: string }>(version: V) => reply.created(version, `${base}/versions/${version.id}`);

const listRoute = defineRoute({
  method: 'get', path: `${base}/versions`, tags, access: read,
  summary: 'List configuration versions',
  description: 'Newest first (by version_number); `status` filters. Drafts made by validate are listed too.',
  query: versionListQuery,
  responses: { 200: page(configVersionRecord) },
  async handler({ query, rc, app }) {
    const found = await listVersions(rc, query, query);
    return { items: await withPropagation(app, found.items), meta: found.meta };
  },
});

const readRoute = defineRoute({
  method: 'get', path: `${base}/versions/:id`, tags, access: read,
  summary: 'Read a configuration version', description: 'With its propagation_status and a strong ETag.',
  params: idParams,
  responses: { 200: bare(configVersionResource) },
  async handler({ params, rc, app }) {
    const [version] = await withPropagation(app, [await findVersion(rc, params.id)]);
    return version!;
  },
});

const validateRoute = defineRoute({
  method: 'post', path: `${base}/validate`, tags, access: write,
  summary: 'Validate the working configuration',
  description: 'Compiles the current origins, routes, cache rules, policies, signing keys, IP rules, custom domains and log drains as the edge would receive them '
    + 'and records a draft version, `valid` or `invalid` with validation_errors ({resource_type, resource_id, message}). Publishes nothing. ' + busy,
  body: validateBody,
  responses: { 201: bare(configVersionResource) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    const [draft] = await withPropagation(app, [await validateConfiguration(app, rc, body.description)]);
    return created(draft!);
  },
});

const publishRoute = defineRoute({
  method: 'post', path: `${base}/publish`, tags, access: publish, idempotent: true,
  summary: 'Publish the working configuration',
  description: 'Compiles and validates the working configuration and makes it the active version (the previous one becomes superseded); edge nodes receive '
    + 'only the resources that changed. Invalid: 422 INVALID_CONFIGURATION with validation_errors and nothing changed. With CDN_PUBLISH_MODE=auto (the '
    + 'default) writes are published without it; with manual, only this publishes. ' + busy,
  body: publishBody,
  responses: { 201: bare(configVersionResource) },
  errors: ['INVALID_CONFIGURATION', 'CONFLICT'],
  async handler({ body, rc, app }) {
    const [version] = await withPropagation(app, [await publishConfiguration(app, rc, body.description)]);
    return created(version!);
  },
});

const rollbackRoute = defineRoute({
  method: 'post', path: `${base}/rollback`, tags, access: publish, idempotent: true,
  summary: 'Roll back to a superseded version',
  description: 'Restores the working configuration (endpoints, origins, routes, cache rules, policies, signing keys, IP rules, custom domains, log drains) to '
    + 'the target version\'s and publishes it as a new active version; the version that was active becomes rolled_back. The target must be superseded: '
    + '404 when it does not exist, 409 CONFLICT when it is another status. Custom domains keep their current certificates. Audit-logged. ' + busy,
  body: rollbackBody,
  responses: { 201: bare(configVersionResource) },
  errors: ['INVALID_CONFIGURATION', 'CONFLICT'],
  async handler({ body, rc, app }) {
    const [version] = await withPropagation(app, [await rollbackConfiguration(app, rc, body.target_version_id, body.reason ?? null)]);
    return created(version!);
  },
});

export const configRoutes = [listRoute, readRoute, validateRoute, publishRoute, rollbackRoute];
