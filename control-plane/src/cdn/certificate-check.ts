// Checks of a custom certificate (document 3 §4.6; DESIGN.md §3) with
// node:crypto's X509Certificate: a full chain (leaf first, each certificate
// issued and signed by the next, the ones after the leaf CAs), the leaf
// covering the domain (RFC 6125: a wildcard is one whole left-most label), the
// private key matching the leaf, every certificate valid now, and the chain
// ending at a trusted CA (certificate-trust.ts: public roots, the system's
// store, CUSTOM_CERT_CA_FILE): a CA's signature proves control of the name,
// so a self-signed certificate or a private CA nobody trusts is refused; and
// the pair one the edge can serve (shared/src/tls/servable.ts: RSA >= 2048
// bits or ECDSA P-256/P-384, loading into a TLS context).
// Each problem is a FieldError with the reason, for a 422.
import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import type { FieldError } from '../http/errors.ts';
import { DAY } from '../core/clock.ts';
import { unservableReason } from '../../../shared/src/tls/servable.ts';
import type { TrustStore } from './certificate-trust.ts';

/** Certificates expiring within this are `expiring_soon`; managed ones are renewed then. */
export const EXPIRING_SOON_MS = 30 * DAY;

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export interface CheckedCertificate {
  /** The chain as stored: each certificate re-encoded, leaf first. */
  chainPem: string;
  /** The private key as stored (PKCS#8 PEM) before sealing. */
  keyPem: string;
  expiresAt: Date;
  fingerprint: string;
}

/** Does `pattern` (a certificate DNS name) cover `hostname` (RFC 6125 §6.4.3: `*` only as the whole left-most label, one label)? */
export function dnsNameCovers(pattern: string, hostname: string): boolean {
  const p = pattern.toLowerCase().replace(/\.$/, '');
  const h = hostname.toLowerCase();
  if (p === h) return true;
  if (!p.startsWith('*.') || h.startsWith('*.')) return false;
  const dot = h.indexOf('.');
  return dot > 0 && h.slice(dot + 1) === p.slice(2) && p.slice(2).includes('.');
}

/** The DNS names of a certificate's subjectAltName (`DNS:a.example.com, DNS:*.example.com`). */
export function dnsNames(cert: X509Certificate): string[] {
  return (cert.subjectAltName ?? '').split(/,\s*/).filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4).replace(/^"|"$/g, ''));
}

/** The certificate status a certificate expiring at `expiresAt` has at `now`. */
export function statusByExpiry(expiresAt: Date, now: Date): 'active' | 'expiring_soon' | 'expired' {
  const left = expiresAt.getTime() - now.getTime();
  return left <= 0 ? 'expired' : left <= EXPIRING_SOON_MS ? 'expiring_soon' : 'active';
}

/**
 * The problems of a certificate and key for `hostname`, or the checked
 * certificate. `prefix` names the fields (`custom_certificate.` or nothing).
 */
export function checkCustomCertificate(
  input: { certificate_pem: string; private_key_pem: string },
  hostname: string,
  context: { now: Date; trust: TrustStore },
  prefix = '',
): { problems: FieldError[]; checked?: CheckedCertificate } {
  const { now, trust } = context;
  const certField = `${prefix}certificate_pem`;
  const keyField = `${prefix}private_key_pem`;
  const problem = (field: string, message: string) => ({ problems: [{ field, message }] });
  const blocks = input.certificate_pem.match(PEM_BLOCK) ?? [];
  if (blocks.length === 0) return problem(certField, 'Must hold the certificate chain as PEM blocks (-----BEGIN CERTIFICATE-----), leaf first');
  const chain: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      chain.push(new X509Certificate(block));
    } catch {
      return problem(certField, `Certificate ${i + 1} of the chain cannot be parsed`);
    }
  }
  const leaf = chain[0]!;
  for (let i = 0; i + 1 < chain.length; i++) {
    const next = chain[i + 1]!;
    if (!next.ca) return problem(certField, `Broken chain: certificate ${i + 2} (${next.subject.replace(/\n/g, ', ')}) is not a CA certificate`);
    if (!chain[i]!.checkIssued(next) || !chain[i]!.verify(next.publicKey)) {
      return problem(certField, `Broken chain: certificate ${i + 1} is not issued and signed by certificate ${i + 2}; send the full chain, leaf first`);
    }
  }
  for (const [i, cert] of chain.entries()) {
    const what = i === 0 ? 'The certificate' : `Certificate ${i + 1} of the chain`;
    if (now < cert.validFromDate) return problem(certField, `${what} is not yet valid (valid from ${cert.validFromDate.toISOString()})`);
    if (now >= cert.validToDate) return problem(certField, `${what} has expired (valid until ${cert.validToDate.toISOString()})`);
  }
  const untrusted = untrustedChain(chain, trust);
  if (untrusted) return problem(certField, untrusted);
  const names = dnsNames(leaf);
  // Without DNS names, the subject's common name (checkHost's fallback, with RFC 6125's wildcard rules).
  const covers = names.length ? names.some((n) => dnsNameCovers(n, hostname)) : leaf.checkHost(hostname, { wildcards: true, partialWildcards: false, multiLabelWildcards: false }) !== undefined;
  if (!covers) {
    return problem(certField, `The certificate does not cover ${hostname} (it names ${names.length ? names.join(', ') : leaf.subject.replace(/\n/g, ', ')})`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(input.private_key_pem);
  } catch {
    return problem(keyField, 'Must be an unencrypted private key in PEM (PKCS#8, PKCS#1 or SEC1)');
  }
  if (!leaf.checkPrivateKey(key)) return problem(keyField, 'The private key does not match the certificate');
  const chainPem = chain.map((c) => c.toString()).join('');
  const keyPem = key.export({ type: 'pkcs8', format: 'pem' }) as string;
  const unservable = unservableReason(chainPem, keyPem);
  if (unservable) return problem(certField, unservable);
  return {
    problems: [],
    checked: {
      chainPem,
      keyPem,
      expiresAt: leaf.validToDate,
      fingerprint: leaf.fingerprint256,
    },
  };
}

/** Why the chain does not end at a trusted CA, or undefined when it does. */
function untrustedChain(chain: X509Certificate[], trust: TrustStore): string | undefined {
  const top = chain.at(-1)!;
  if (trust.anchorFor(top)) return undefined;
  const sources = 'Node\'s bundled roots, the system\'s store or CUSTOM_CERT_CA_FILE';
  if (chain.length === 1 && top.checkIssued(top)) {
    return `The certificate is self-signed, which proves no control of the hostname: use one issued by a CA trusted here (${sources}), or a managed certificate`;
  }
  const subject = (c: X509Certificate) => c.subject.replace(/\n/g, ', ');
  return top.checkIssued(top)
    ? `The chain ends at ${subject(top)}, a CA not trusted here (trusted: ${sources}); use a certificate from a trusted CA, or a managed certificate`
    : `The chain ends at ${subject(top)}, issued by ${top.issuer.replace(/\n/g, ', ')}, which is not a CA trusted here (trusted: ${sources}); send the full chain up to a trusted CA`;
}
