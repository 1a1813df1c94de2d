// Custom domains and their certificates (document 3 §3, §4.6; DESIGN.md §3).
// A hostname is served by at most one endpoint on the whole platform (domains
// are exact names, so overlapping is being equal), and only once its claim is
// validated (issue 21 item 7): a custom domain's certificate, checked to cover
// the hostname, or a managed domain's, issued once its DNS records proved
// control. An unvalidated claim blocks nobody: other endpoints may claim the
// hostname too, the first claim validated takes it and the others are failed
// ("taken over"); a claim of a hostname validated elsewhere, or a second claim
// by the same endpoint, is a 409 CONFLICT (partial unique indexes settle
// races the same way); a name inside CDN_DOMAIN is a 422
// INVALID_CONFIGURATION naming `hostname`, since it would shadow or
// impersonate endpoint hostnames.
//
// custom: the certificate and key are checked (certificate-check.ts) and the
// domain is `active` (or `expiring_soon`) at once; a replacement keeps the
// superseded certificate for OVERLAP_MS so edges still applying the new
// configuration keep serving. managed: `pending_validation` with the DNS
// records to create; retry-validation looks them up and issues the
// certificate (provisioning → active); the issuer is the internal CA or an
// ACME CA (acme-issuer.ts), whose DNS-01 order is opened at creation (and at
// renewal) so the TXT value can be shown. Private keys are sealed with the
// secret box (AAD: table and row id) and appear in no reply or audit entry.
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { HOUR } from '../core/clock.ts';
import { ApiError, conflict, found, type FieldError } from '../http/errors.ts';
import type { Endpoint } from './cdn.entities.ts';
import { checkCustomCertificate, statusByExpiry, type CheckedCertificate } from './certificate-check.ts';
import type { IssuedCertificate } from './certificate-issuer.ts';
import { CustomDomain, type DnsValidation } from './domain-entity.ts';
import { IssuanceError } from './certificate-issuer.ts';
import type { CertificateInput, CreateDomainInput } from './domain-record.ts';
import { findEndpoint } from './endpoint-service.ts';
import { assertValidConfiguration, listResources } from './fields.ts';
import type { CdnServices } from './services.ts';

/** How long a replaced custom certificate stays deployable beside its successor. */
export const OVERLAP_MS = 24 * HOUR;

const DOMAIN_FIELDS = ['hostname', 'certificate_source', 'certificate_status', 'certificate_expires_at', 'certificate_issuer', 'certificate_fingerprint'] as const;
const snapshot = (d: CustomDomain) => ({ ...Object.fromEntries(DOMAIN_FIELDS.map((f) => [f, d[f]])), endpoint_id: d.endpoint.id }) as Record<string, unknown>;
export const keyAad = (domainId: string) => `cdn_custom_domain:${domainId}`;

export async function findDomain(rc: RequestContext, endpointId: string, domainId: string): Promise<CustomDomain> {
  return found(await rc.em.findOne(CustomDomain, { id: domainId, endpoint: endpointId }), 'Custom domain');
}

export async function listDomains(rc: RequestContext, endpointId: string, filters: { certificate_status?: string }, page: { cursor?: string; limit: number }) {
  await findEndpoint(rc, endpointId);
  const where = { endpoint: endpointId, ...(filters.certificate_status ? { certificate_status: filters.certificate_status } : {}) };
  return listResources(rc, CustomDomain, where, { ...page, sort: { field: 'created_at', direction: 'asc' } });
}

/** Whether a claim is validated: it holds a certificate for its hostname (custom: checked at creation; managed: issued). */
const validated = (d: Pick<CustomDomain, 'certificate_pem'>) => d.certificate_pem !== null;

/** Whether another claim of the hostname is validated. */
async function validatedElsewhere(em: EntityManager, hostname: string, domainId: string): Promise<boolean> {
  return (await em.count(CustomDomain, { hostname, id: { $ne: domainId }, certificate_pem: { $ne: null } })) > 0;
}

/** `em`: the open transaction's (on the embedded database a query through another entity manager waits for it forever). */
async function hostnameProblems(em: EntityManager, app: CdnServices, hostname: string, endpointId: string): Promise<FieldError[]> {
  const zone = app.config.CDN_DOMAIN;
  if (hostname === zone || hostname.endsWith(`.${zone}`)) {
    return [{ field: 'hostname', message: `${hostname} lies inside the CDN's own domain ${zone}; use the endpoint's hostname instead` }];
  }
  const claims = await em.find(CustomDomain, { hostname }, { fields: ['id', 'endpoint', 'certificate_pem'] });
  if (claims.some((d) => d.endpoint.id === endpointId)) throw conflict(`The hostname ${hostname} is already a custom domain of this endpoint`);
  if (claims.some(validated)) throw conflict(`The hostname ${hostname} is already a validated custom domain of another endpoint`);
  return [];
}

/**
 * A claim was just validated: the other endpoints' unvalidated claims of its hostname are failed, saying why
 * (they never served it; their owners learn that another endpoint proved control of the name first).
 */
async function takeOver(rc: RequestContext, em: EntityManager, domain: CustomDomain): Promise<void> {
  const others = await em.find(CustomDomain, { hostname: domain.hostname, id: { $ne: domain.id }, certificate_pem: null });
  for (const other of others) {
    const before = snapshot(other);
    other.certificate_status = 'failed';
    other.acme_order = null;
    other.validation_error = `Taken over: ${domain.hostname} was validated for another endpoint, which serves it now. Delete this claim, or have that endpoint delete its domain and retry validation`;
    recordAudit(rc, { action: 'custom_domain.taken_over', resource_type: 'custom_domain', resource_id: other.id, changes: changesOf(before, snapshot(other)) }, em);
  }
}

function dnsValidationFor(hostname: string, endpoint: Endpoint): DnsValidation {
  return {
    cname_name: hostname,
    cname_value: endpoint.hostname,
    acme_challenge_name: `_acme-challenge.${hostname}`,
    acme_challenge_value: '', // set by openValidation once the issuer gave it
  };
}

function install(app: CdnServices, domain: CustomDomain, cert: CheckedCertificate | IssuedCertificate, issuer: CustomDomain['certificate_issuer']): void {
  domain.certificate_pem = cert.chainPem;
  domain.private_key_sealed = app.secretBox.seal(cert.keyPem, keyAad(domain.id));
  domain.certificate_expires_at = cert.expiresAt;
  domain.certificate_fingerprint = cert.fingerprint;
  domain.certificate_issuer = issuer;
  domain.certificate_status = statusByExpiry(cert.expiresAt, app.clock.now());
  domain.validation_error = null;
}

const certificateContext = (app: CdnServices) => ({ now: app.clock.now(), trust: app.cdnCertificateTrust });

export async function createDomain(app: CdnServices, rc: RequestContext, endpointId: string, input: CreateDomainInput): Promise<CustomDomain> {
  const endpoint = await findEndpoint(rc, endpointId);
  const created = await rc.em.transactional(async (em) => {
    const id = crypto.randomUUID();
    const problems = await hostnameProblems(em, app, input.hostname, endpoint.id);
    let checked: CheckedCertificate | undefined;
    if (input.custom_certificate) {
      const result = checkCustomCertificate(input.custom_certificate, input.hostname, certificateContext(app), 'custom_certificate.');
      problems.push(...result.problems);
      checked = result.checked;
    }
    assertValidConfiguration(problems);
    const managed = input.certificate_source === 'managed';
    const domain = em.create(CustomDomain, {
      id, endpoint, hostname: input.hostname, certificate_source: input.certificate_source, certificate_status: 'pending_validation',
      certificate_expires_at: null, certificate_issuer: null, certificate_fingerprint: null, certificate_pem: null, private_key_sealed: null,
      previous_certificate_pem: null, previous_private_key_sealed: null, previous_retires_at: null,
      dns_validation: managed ? dnsValidationFor(input.hostname, endpoint) : null, validation_error: null, acme_order: null,
    } as never);
    if (checked) {
      install(app, domain, checked, 'custom');
      await takeOver(rc, em, domain);
    }
    recordAudit(rc, { action: 'custom_domain.created', resource_type: 'custom_domain', resource_id: domain.id, changes: changesOf({}, snapshot(domain)) }, em);
    return domain;
  });
  // After the insert commits, so no transaction waits on the ACME server: the TXT value (ACME: a new order).
  if (created.certificate_source === 'managed') {
    await openValidation(app, rc, created);
    await rc.em.flush();
  }
  return created;
}

/** Replaces a custom certificate; the superseded one stays deployable for OVERLAP_MS. */
export async function replaceCertificate(app: CdnServices, rc: RequestContext, endpointId: string, domainId: string, input: CertificateInput): Promise<CustomDomain> {
  const domain = await findDomain(rc, endpointId, domainId);
  if (domain.certificate_source !== 'custom') {
    throw new ApiError('CONFLICT', 'The domain has a managed certificate, issued and renewed by the CDN; only custom certificates are replaced');
  }
  const { problems, checked } = checkCustomCertificate(input, domain.hostname, certificateContext(app));
  assertValidConfiguration(problems);
  const before = snapshot(domain);
  domain.previous_certificate_pem = domain.certificate_pem;
  domain.previous_private_key_sealed = domain.private_key_sealed;
  domain.previous_retires_at = new Date(app.clock.now().getTime() + OVERLAP_MS);
  install(app, domain, checked!, 'custom');
  recordAudit(rc, { action: 'custom_domain.certificate_replaced', resource_type: 'custom_domain', resource_id: domain.id, changes: changesOf(before, snapshot(domain)) });
  await rc.em.flush();
  return domain;
}

/** The dns_validation records the resolver does not find, described. */
async function missingRecords(app: CdnServices, domain: CustomDomain): Promise<string[]> {
  const dns = domain.dns_validation!;
  const missing: string[] = [];
  if (!(await app.cdnDomainResolver.cname(dns.cname_name)).includes(dns.cname_value)) missing.push(`CNAME ${dns.cname_name} → ${dns.cname_value}`);
  if (!(await app.cdnDomainResolver.txt(dns.acme_challenge_name)).includes(dns.acme_challenge_value)) missing.push(`TXT ${dns.acme_challenge_name} = ${dns.acme_challenge_value}`);
  return missing;
}

const hasValidCertificate = (app: CdnServices, d: CustomDomain) => !!d.certificate_expires_at && d.certificate_expires_at > app.clock.now();

/** Records an issuance failure: the reason on the domain; `failed` unless a certificate is still valid; a closed ACME order dropped. */
function failIssuance(app: CdnServices, rc: RequestContext, domain: CustomDomain, error: unknown): void {
  rc.log.warn({ err: error, domain: domain.id }, 'managed certificate issuance failed');
  const reason = error instanceof IssuanceError ? error.message : 'The certificate could not be issued';
  if (!(error instanceof IssuanceError) || error.orderClosed) domain.acme_order = null;
  if (!hasValidCertificate(app, domain)) domain.certificate_status = 'failed';
  domain.validation_error = `${reason.replace(/\.$/, '')}; retry validation later`.slice(0, 500);
}

/**
 * Asks the issuer for the TXT value to publish (ACME: opens an order) and
 * puts it in dns_validation. True when the CA needs no new record (an ACME
 * authorization it still holds); an unreachable server → failIssuance.
 */
async function openValidation(app: CdnServices, rc: RequestContext, domain: CustomDomain): Promise<boolean> {
  try {
    const start = await app.cdnCertificateIssuer.startValidation(rc, domain.hostname);
    domain.dns_validation = { ...domain.dns_validation!, acme_challenge_value: start.value };
    domain.acme_order = start.order;
    return start.ready;
  } catch (error) {
    failIssuance(app, rc, domain, error);
    return false;
  }
}

const publishNotice = (dns: DnsValidation, what: string) => `${what}: publish TXT ${dns.acme_challenge_name} = ${dns.acme_challenge_value}, then retry validation`;

/**
 * Looks up the managed domain's DNS records and, when they are in place,
 * issues its certificate. No effect on a custom domain, or an active (or
 * expiring_soon) one without a renewal waiting. Missing records leave it
 * pending_validation with the reason; an issuer failure makes it `failed`
 * (a still valid certificate keeps its status). With ACME and no open order
 * (the server was unreachable, or the last challenge failed), a new order is
 * opened and its new TXT value must be published first.
 */
export async function retryValidation(app: CdnServices, rc: RequestContext, endpointId: string, domainId: string): Promise<CustomDomain> {
  const domain = await findDomain(rc, endpointId, domainId);
  const current = domain.certificate_status === 'active' || domain.certificate_status === 'expiring_soon';
  if (domain.certificate_source !== 'managed' || (current && !domain.acme_order)) return domain;
  const before = snapshot(domain);
  if (!validated(domain) && await validatedElsewhere(rc.em, domain.hostname, domain.id)) {
    // Another endpoint's claim was validated first: nothing is issued for this one.
    domain.certificate_status = 'failed';
    domain.acme_order = null;
    domain.validation_error = `Taken over: ${domain.hostname} was validated for another endpoint, which serves it now. Delete this claim, or have that endpoint delete its domain and retry validation`;
  } else if (app.cdnCertificateIssuer.kind === 'acme' && !domain.acme_order) {
    const ready = await openValidation(app, rc, domain);
    if (ready) await issueManaged(app, rc, domain);
    else if (domain.acme_order) {
      if (!domain.certificate_expires_at) domain.certificate_status = 'pending_validation';
      domain.validation_error = publishNotice(domain.dns_validation!, 'A new ACME challenge was opened');
    }
  } else {
    const missing = await missingRecords(app, domain);
    if (missing.length) {
      domain.validation_error = `DNS records not found: ${missing.join('; ')}`;
      if (!domain.certificate_expires_at) domain.certificate_status = 'pending_validation';
    } else {
      if (!domain.certificate_expires_at) domain.certificate_status = 'provisioning';
      await issueManaged(app, rc, domain);
    }
  }
  recordAudit(rc, { action: 'custom_domain.validation_retried', resource_type: 'custom_domain', resource_id: domain.id, changes: changesOf(before, snapshot(domain)), metadata: { validation_error: domain.validation_error } });
  await rc.em.flush();
  return domain;
}

/**
 * Issues (or renews) a managed certificate: active with its expiry, or failed with the reason. A claim validated
 * by its first issuance takes the hostname over from the other endpoints' unvalidated claims.
 */
export async function issueManaged(app: CdnServices, rc: RequestContext, domain: CustomDomain): Promise<void> {
  const first = !validated(domain);
  try {
    const issued = await app.cdnCertificateIssuer.issue(rc, domain.hostname, app.clock.now(), domain.acme_order ?? null);
    install(app, domain, issued, issued.issuer);
    domain.acme_order = null;
  } catch (error) {
    failIssuance(app, rc, domain, error);
    return;
  }
  if (first) await takeOver(rc, rc.em, domain);
}

/**
 * Renews a managed certificate due for it (the daily job). The internal CA
 * re-issues at once. ACME opens a new order: when the CA still holds a valid
 * authorization it is finalized at once; otherwise its new TXT value is put
 * in dns_validation, the domain keeps its certificate and date status, and
 * the renewal completes when the record is found (retry-validation, or the
 * next day's job).
 */
export async function renewManaged(app: CdnServices, rc: RequestContext, domain: CustomDomain): Promise<void> {
  if (app.cdnCertificateIssuer.kind === 'internal_ca') return issueManaged(app, rc, domain);
  if (domain.acme_order) {
    if ((await missingRecords(app, domain)).length === 0) await issueManaged(app, rc, domain);
    return;
  }
  if (await openValidation(app, rc, domain)) return issueManaged(app, rc, domain);
  if (!domain.acme_order) return;
  domain.validation_error = publishNotice(domain.dns_validation!, 'Renewal needs a new ACME challenge');
  recordAudit(rc, {
    action: 'custom_domain.renewal_challenge_opened', resource_type: 'custom_domain', resource_id: domain.id,
    metadata: { acme_challenge_name: domain.dns_validation!.acme_challenge_name, acme_challenge_value: domain.dns_validation!.acme_challenge_value },
  });
}

/** Detaches the hostname (a managed certificate is revoked where its issuer supports it). */
export async function deleteDomain(app: CdnServices, rc: RequestContext, endpointId: string, domainId: string): Promise<void> {
  const domain = await findDomain(rc, endpointId, domainId);
  let revoked: boolean | undefined;
  if (domain.certificate_issuer === 'acme' && domain.certificate_pem) {
    // Best effort (bounded wait): the domain goes whatever the ACME server says.
    revoked = await app.cdnCertificateIssuer.revoke(rc, domain.certificate_pem).then(() => true, (error) => {
      rc.log.warn({ err: error, domain: domain.id }, 'ACME certificate revocation failed');
      return false;
    });
  }
  recordAudit(rc, {
    action: 'custom_domain.deleted', resource_type: 'custom_domain', resource_id: domain.id, changes: changesOf(snapshot(domain), {}),
    ...(revoked === undefined ? {} : { metadata: { certificate_revoked: revoked } }),
  });
  rc.em.remove(domain);
  await rc.em.flush();
}
