// Custom domains and their certificates (document 3 §2 "Custom domain", §3;
// DESIGN.md §3), and the internal CA that issues managed certificates when no
// ACME directory is configured. Private keys are sealed with the platform's
// secret box (AAD: table and row id) and never leave through the API.
import { defineEntity, p } from '@mikro-orm/core';
import { Endpoint } from './cdn.entities.ts';

export const CERTIFICATE_SOURCES = ['managed', 'custom'] as const;
export const CERTIFICATE_STATUSES = ['pending_validation', 'provisioning', 'active', 'expiring_soon', 'expired', 'failed'] as const;
export type CertificateStatus = (typeof CERTIFICATE_STATUSES)[number];
export const CERTIFICATE_ISSUERS = ['custom', 'internal_ca', 'acme'] as const;

export interface DnsValidation { cname_name: string; cname_value: string; acme_challenge_name: string; acme_challenge_value: string }
/** The open ACME order of a managed domain: its URL and its DNS-01 challenge's (ACME issuer only). */
export interface AcmeOrderRef { order_url: string; authorization_url: string; challenge_url: string; directory_url: string }

export const CustomDomainSchema = defineEntity({
  name: 'CustomDomain',
  tableName: 'cdn_custom_domain',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    // restrict: an endpoint is deleted only once its domains are (the service answers 409 first).
    endpoint: () => p.manyToOne(Endpoint).deleteRule('restrict'),
    // Unique among validated claims (those holding a certificate): unvalidated claims of a name may coexist (issue 21 item 7).
    hostname: p.string().length(253),
    certificate_source: p.enum(CERTIFICATE_SOURCES),
    certificate_status: p.enum(CERTIFICATE_STATUSES),
    certificate_expires_at: p.datetime().nullable(),
    certificate_issuer: p.enum(CERTIFICATE_ISSUERS).nullable(),
    // SHA-256 of the leaf, colon-separated hex (X509Certificate.fingerprint256).
    certificate_fingerprint: p.string().length(95).nullable(),
    certificate_pem: p.text().nullable(),
    private_key_sealed: p.text().nullable().hidden(),
    // The certificate a replacement superseded, kept for the overlap period so edges still applying the new one keep serving.
    previous_certificate_pem: p.text().nullable(),
    previous_private_key_sealed: p.text().nullable().hidden(),
    previous_retires_at: p.datetime().nullable(),
    dns_validation: p.json<DnsValidation>().nullable(),
    validation_error: p.string().length(500).nullable(),
    // Set while an ACME order waits for its DNS-01 challenge (creation or renewal); null once issued.
    acme_order: p.json<AcmeOrderRef>().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'cdn_custom_domain_endpoint_idx', properties: ['endpoint', 'created_at', 'id'] },
    { name: 'cdn_custom_domain_expiry_idx', properties: ['certificate_expires_at'] },
    { name: 'cdn_custom_domain_hostname_idx', properties: ['hostname'] },
    { name: 'cdn_custom_domain_hostname_key', expression: 'create unique index cdn_custom_domain_hostname_key on cdn_custom_domain (hostname) where certificate_pem is not null' },
  ],
  uniques: [{ name: 'cdn_custom_domain_endpoint_hostname_key', properties: ['endpoint', 'hostname'] }],
});
export class CustomDomain extends CustomDomainSchema.class {}
CustomDomainSchema.setClass(CustomDomain);

/** The one internal CA (row id 1): made on first use, its key sealed. */
export const InternalCaSchema = defineEntity({
  name: 'InternalCa',
  tableName: 'cdn_internal_ca',
  properties: {
    id: p.smallint().primary().autoincrement(false),
    certificate_pem: p.text(),
    private_key_sealed: p.text().hidden(),
    created_at: p.datetime(),
  },
});
export class InternalCa extends InternalCaSchema.class {}
InternalCaSchema.setClass(InternalCa);

/** The ACME account of a directory: made on first use (the first writer wins), its key sealed. */
export const AcmeAccountSchema = defineEntity({
  name: 'AcmeAccount',
  tableName: 'cdn_acme_account',
  properties: {
    directory_url: p.string().length(2048).primary(),
    account_key_sealed: p.text().hidden(),
    account_url: p.string().length(2048).nullable(),
    created_at: p.datetime(),
  },
});
export class AcmeAccount extends AcmeAccountSchema.class {}
AcmeAccountSchema.setClass(AcmeAccount);
