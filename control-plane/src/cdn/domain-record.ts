// The Custom domain record and bodies (document 3 §2 "Custom domain", §4.6).
// Hostnames are DNS names of at most 253 characters, lower-cased, without a
// trailing dot; internationalised names are stored as their IDNA (punycode)
// form. Wildcard domains are refused: the edge finds an endpoint by the exact
// Host (edge-agent routing's byHost), so `*.example.com` could never be served;
// a wildcard *certificate* may cover a domain. IP addresses are not domains.
import { domainToASCII } from 'node:url';
import { z } from 'zod';
import { orNull, timestamp, timestampOrNull, uuid } from '../http/schemas.ts';
import { versioned } from '../http/route.ts';
import { CERTIFICATE_SOURCES, CERTIFICATE_STATUSES, type CustomDomain } from './domain-entity.ts';
import { idOf } from './fields.ts';

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
export const MAX_CERTIFICATE_PEM = 65_536;
export const MAX_PRIVATE_KEY_PEM = 16_384;

/** The stored form of a domain name, or the reason it is not one. */
export function normaliseDomain(raw: string): { hostname: string } | { problem: string } {
  const name = raw.trim().replace(/\.$/, '');
  if (name.includes('*')) return { problem: 'Must be one domain name: wildcard domains are not served (a wildcard certificate may cover the domain)' };
  // IDNA (UTS #46) through the WHATWG URL rules: lower-cases and turns Unicode labels into punycode; '' when it cannot.
  const ascii = /^[\x00-\x7f]*$/.test(name) ? name.toLowerCase() : domainToASCII(name);
  if (!ascii) return { problem: 'Must be a valid domain name (internationalised names are converted to punycode; this one cannot be)' };
  const labels = ascii.split('.');
  if (labels.length < 2) return { problem: 'Must be a fully qualified domain name with at least two labels' };
  if (!labels.every((l) => LABEL.test(l))) return { problem: 'Must be a domain name: letters, digits and "-" in dot-separated labels of 1 to 63 characters' };
  if (/^[0-9]+$/.test(labels.at(-1)!)) return { problem: 'Must be a domain name, not an IP address' };
  const hostname = ascii;
  if (hostname.length > 253) return { problem: 'Must be at most 253 characters (in its punycode form)' };
  return { hostname };
}

export const hostnameField = () => z.string().max(253 * 4).transform((raw, ctx) => {
  const result = normaliseDomain(raw);
  if ('problem' in result) {
    ctx.addIssue({ code: 'custom', message: result.problem });
    return z.NEVER;
  }
  return result.hostname;
});

export const certificateBody = z.strictObject({
  certificate_pem: z.string().min(1).max(MAX_CERTIFICATE_PEM).describe('The full chain in PEM, leaf first; must cover the hostname and be valid now'),
  private_key_pem: z.string().min(1).max(MAX_PRIVATE_KEY_PEM).describe('The leaf\'s unencrypted private key in PEM; stored encrypted, never returned'),
});

export const createDomainBody = z.strictObject({
  hostname: hostnameField().describe('A domain name (≤ 253 characters); internationalised names are stored in punycode; wildcards are refused'),
  certificate_source: z.enum(CERTIFICATE_SOURCES),
  custom_certificate: certificateBody.optional().describe('Required when certificate_source is custom, refused otherwise'),
}).superRefine((body, ctx) => {
  if (body.certificate_source === 'custom' && !body.custom_certificate) ctx.addIssue({ code: 'custom', path: ['custom_certificate'], message: 'Required when certificate_source is custom' });
  if (body.certificate_source === 'managed' && body.custom_certificate) ctx.addIssue({ code: 'custom', path: ['custom_certificate'], message: 'Only with certificate_source custom (managed certificates are issued by the CDN)' });
});
export type CreateDomainInput = z.output<typeof createDomainBody>;
export type CertificateInput = z.output<typeof certificateBody>;

const dnsValidationRecord = z.object({ cname_name: z.string(), cname_value: z.string(), acme_challenge_name: z.string(), acme_challenge_value: z.string() });

export const domainRecord = z.object({
  id: z.uuid(),
  endpoint_id: z.uuid(),
  hostname: z.string(),
  certificate_source: z.enum(CERTIFICATE_SOURCES),
  certificate_status: z.enum(CERTIFICATE_STATUSES),
  certificate_expires_at: timestampOrNull(),
  dns_validation: orNull(dnsValidationRecord).describe('Managed certificates: the records to create before retry-validation; null for custom ones'),
  validation_error: orNull(z.string()).describe('Why the last validation or issuance did not succeed'),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const domainResource = versioned(domainRecord);
export const presentDomain = (d: CustomDomain) => ({ ...d, endpoint_id: idOf(d.endpoint)! });

export const domainParams = z.strictObject({ id: uuid().describe('The endpoint id'), domain_id: uuid() });
