// Signing keys of an endpoint (document 3 §4.8): list and create, with their
// distribution aliases; read (never the secret), delete and rotate.
import { bare, empty, page, reply } from '../http/route.ts';
import { pageQuery } from '../http/schemas.ts';
import { distributionAlias } from './endpoint-routes.ts';
import { endpointChildParams, endpointParams, listEndpointChildren } from './endpoint-scoped.ts';
import { SigningKey } from './policies.entities.ts';
import { defineCdnRoute as defineRoute } from './services.ts';
import {
  createSigningKeyBody, MAX_GRACE_HOURS, presentSigningKey, rotateSigningKeyBody, SIGNED_URL_ALGORITHM, signingKeyRecord, signingKeyResource,
  signingKeyWithSecret,
} from './signing-key-record.ts';
import { EDGE_REQUEST_ORDER } from './endpoint-record.ts';
import { createSigningKey, deleteSigningKey, findSigningKey, rotateSigningKey } from './signing-key-service.ts';

const tags = ['CDN: signing keys'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const base = '/v1/cdn/endpoints/:id/signing-keys';
const params = endpointChildParams('key_id');
const aliasNote = ' Also under `/v1/cdn/distributions/{id}/signing-keys`.';

export const listSigningKeysRoute = defineRoute({
  method: 'get', path: base, tags, access: read,
  summary: 'List the signing keys of an endpoint', description: `Oldest first; secrets are never shown. ${SIGNED_URL_ALGORITHM}${aliasNote}`,
  params: endpointParams, query: pageQuery({}),
  responses: { 200: page(signingKeyRecord) },
  async handler({ params, query, rc, app }) {
    const found = await listEndpointChildren(rc, SigningKey, params.id, {}, query, { field: 'created_at', direction: 'asc' });
    return { items: found.items.map((k) => presentSigningKey(k, app.clock.now())), meta: found.meta };
  },
});

export const createSigningKeyRoute = defineRoute({
  method: 'post', path: base, tags, access: write, idempotent: true,
  summary: 'Create a signing key',
  description: 'name required; algorithm HMAC-SHA256 (default) or HMAC-SHA512; secret at least 32 characters, or left out for 64 generated ones. The reply '
    + 'carries the secret, once: it is stored encrypted and never shown again (an idempotent replay repeats this reply). Several active keys are all '
    + `accepted. Audit-logged without the secret. ${SIGNED_URL_ALGORITHM} ${EDGE_REQUEST_ORDER}${aliasNote}`,
  params: endpointParams, body: createSigningKeyBody,
  responses: { 201: bare(signingKeyWithSecret) },
  async handler({ params, body, rc, app }) {
    const { key, secret } = await createSigningKey(app, rc, params.id, body);
    return reply.created({ ...presentSigningKey(key, app.clock.now()), secret }, `/v1/cdn/endpoints/${params.id}/signing-keys/${key.id}`);
  },
});

export const readSigningKeyRoute = defineRoute({
  method: 'get', path: `${base}/:key_id`, tags, access: read,
  summary: 'Read a signing key', description: 'Without the secret.',
  params,
  responses: { 200: bare(signingKeyResource) },
  async handler({ params, rc, app }) {
    return presentSigningKey(await findSigningKey(rc, params.id, params.key_id), app.clock.now());
  },
});

export const deleteSigningKeyRoute = defineRoute({
  method: 'delete', path: `${base}/:key_id`, tags, access: write,
  summary: 'Delete a signing key',
  description: 'URLs signed with it stop working at once. The endpoint\'s last active key is refused with 409 RESOURCE_IN_USE while the endpoint has '
    + 'token_auth_enabled. Audit-logged.',
  params,
  responses: { 204: empty },
  errors: ['RESOURCE_IN_USE'],
  async handler({ params, rc }) {
    await deleteSigningKey(rc, params.id, params.key_id);
    return reply.noContent();
  },
});

export const rotateSigningKeyRoute = defineRoute({
  method: 'post', path: `${base}/:key_id/rotate`, tags, access: write,
  summary: 'Rotate a signing key',
  description: `Gives the key a new generated secret, shown once in the reply. The replaced secret is still accepted for grace_period_hours (0..${MAX_GRACE_HOURS}, `
    + 'default 24; grace_period_ends_at says until when), then dropped; 0 ends it at once, and with it every secret replaced by an earlier rotation that is still in its grace. The edge accepts URLs signed with the replaced secret until '
    + `that moment exactly and refuses them after. Audit-logged without secrets. ${SIGNED_URL_ALGORITHM}`,
  params, body: rotateSigningKeyBody,
  responses: { 200: bare(signingKeyWithSecret) },
  async handler({ params, body, rc, app }) {
    const { key, secret } = await rotateSigningKey(app, rc, params.id, params.key_id, body.grace_period_hours);
    return { ...presentSigningKey(key, app.clock.now()), secret };
  },
});

export const signingKeyRoutes = [
  listSigningKeysRoute, createSigningKeyRoute, readSigningKeyRoute, deleteSigningKeyRoute, rotateSigningKeyRoute,
  distributionAlias(listSigningKeysRoute), distributionAlias(createSigningKeyRoute),
];
