// Custom domains (document 3 §4.6; DESIGN.md §6): list and create per endpoint
// (and per distribution), read, delete, retry validation of a managed
// certificate, replace a custom certificate. Private keys go in, never out.
import { z } from 'zod';
import { bare, empty, page, reply } from '../http/route.ts';
import { pageQuery } from '../http/schemas.ts';
import { CERTIFICATE_STATUSES, type CustomDomain } from './domain-entity.ts';
import { certificateBody, createDomainBody, domainParams, domainRecord, domainResource, presentDomain } from './domain-record.ts';
import { createDomain, deleteDomain, findDomain, listDomains, replaceCertificate, retryValidation } from './domain-service.ts';
import { distributionAlias } from './endpoint-routes.ts';
import { idParams } from './fields.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

const tags = ['CDN: custom domains'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const base = '/v1/cdn/endpoints/:id/domains';
const location = (d: CustomDomain) => `/v1/cdn/endpoints/${d.endpoint.id}/domains/${d.id}`;

const list = defineRoute({
  method: 'get', path: base, tags, access: read,
  summary: 'List the custom domains of an endpoint', description: 'Oldest first; filter certificate_status. `/v1/cdn/distributions/{id}/domains` answers alike.',
  params: idParams, query: pageQuery({ certificate_status: z.enum(CERTIFICATE_STATUSES).optional() }),
  responses: { 200: page(domainRecord) },
  async handler({ params, query, rc }) {
    const found = await listDomains(rc, params.id, query, query);
    return { items: found.items.map(presentDomain), meta: found.meta };
  },
});

const create = defineRoute({
  method: 'post', path: base, tags, access: write, idempotent: true,
  summary: 'Add a custom domain to an endpoint',
  description: 'hostname must be unused on the platform (409 CONFLICT otherwise) and outside CDN_DOMAIN (422). custom: custom_certificate {certificate_pem '
    + '(full chain, leaf first), private_key_pem} is checked — chain order and signatures, the hostname (RFC 6125 wildcards: one label), the key matching the '
    + 'leaf, valid now, the chain ending at a trusted CA (public roots, the system\'s store, CUSTOM_CERT_CA_FILE; self-signed is refused), a key the edge '
    + 'serves (RSA >= 2048 bits, ECDSA P-256 or P-384) — and refused with 422 INVALID_CONFIGURATION giving the reason; the domain is then active '
    + '(expiring_soon within 30 days of expiry). '
    + 'managed: pending_validation with dns_validation (a CNAME to the endpoint\'s CDN hostname and the _acme-challenge TXT record) to create before '
    + '`retry-validation`. The private key is stored encrypted and never returned. Audit-logged.',
  params: idParams, body: createDomainBody,
  responses: { 201: bare(domainResource) },
  errors: ['INVALID_CONFIGURATION', 'CONFLICT'],
  async handler({ params, body, rc, app }) {
    const domain = await createDomain(app, rc, params.id, body);
    return reply.created(presentDomain(domain), location(domain));
  },
});

const readOne = defineRoute({
  method: 'get', path: `${base}/:domain_id`, tags, access: read,
  summary: 'Read a custom domain', description: 'A domain of another endpoint is not found here.',
  params: domainParams,
  responses: { 200: bare(domainResource) },
  async handler({ params, rc }) {
    return presentDomain(await findDomain(rc, params.id, params.domain_id));
  },
});

const remove = defineRoute({
  method: 'delete', path: `${base}/:domain_id`, tags, access: write,
  summary: 'Remove a custom domain',
  description: 'Detaches the hostname: the edge stops serving it once the configuration has propagated. Its certificate and key are deleted; an ACME certificate is '
    + 'revoked first, best effort (the delete does not wait on an unreachable ACME server); the internal CA publishes no revocation list. Audit-logged.',
  params: domainParams,
  responses: { 204: empty },
  async handler({ params, rc, app }) {
    await deleteDomain(app, rc, params.id, params.domain_id);
    return reply.noContent();
  },
});

const retry = defineRoute({
  method: 'post', path: `${base}/:domain_id/retry-validation`, tags, access: write,
  summary: 'Retry validation of a managed certificate',
  description: 'Looks up the dns_validation records; when both are in place the certificate is issued (provisioning → active with certificate_expires_at). '
    + 'Missing records leave it pending_validation with validation_error naming them; a failed issuance makes it failed with the reason in '
    + 'validation_error. With ACME_DIRECTORY_URL the ACME server then validates the DNS-01 challenge; when no ACME order is open (the server was '
    + 'unreachable, or the last challenge failed) a new one is opened and its new acme_challenge_value must be published first. No effect on a custom '
    + 'certificate, or an active one unless a renewal waits for its new TXT record. Audit-logged.',
  params: domainParams,
  responses: { 200: bare(domainResource) },
  async handler({ params, rc, app }) {
    return presentDomain(await retryValidation(app, rc, params.id, params.domain_id));
  },
});

const replace = defineRoute({
  method: 'put', path: `${base}/:domain_id/certificate`, tags, access: write,
  summary: 'Replace a custom certificate',
  description: 'Checked like a new custom certificate (422 with the reason, nothing changed). The new certificate replaces the old one in one write, and the '
    + 'old one stays deployable for 24 hours beside it, so no edge is left without a certificate while the change propagates. A managed domain: 409 CONFLICT. '
    + 'Audit-logged (fingerprints, never keys).',
  params: domainParams, body: certificateBody,
  responses: { 200: bare(domainResource) },
  errors: ['INVALID_CONFIGURATION', 'CONFLICT'],
  async handler({ params, body, rc, app }) {
    return presentDomain(await replaceCertificate(app, rc, params.id, params.domain_id, body));
  },
});

export const domainRoutes = [list, create, distributionAlias(list), distributionAlias(create), readOne, remove, retry, replace];
