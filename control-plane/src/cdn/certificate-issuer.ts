// Where managed certificates come from (DESIGN.md §3). Without
// ACME_DIRECTORY_URL the control plane is its own CA, like Caddy's internal
// issuer, so the managed flow works offline: one ECDSA P-256 root made on
// first use, its key sealed in cdn_internal_ca (row 1; two replicas racing to
// make it keep the first), signing 90-day leaf certificates with
// @peculiar/x509 (node:crypto parses certificates but cannot sign them).
// Edges and browsers trust these only where the CA's certificate is installed.
import type * as X509 from '@peculiar/x509';
import { createPrivateKey, randomBytes, webcrypto, X509Certificate } from 'node:crypto';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { RequestContext } from '../core/request-context.ts';
import { DAY } from '../core/clock.ts';
import { lazy } from '../core/lazy.ts';
import { InternalCa, type AcmeOrderRef } from './domain-entity.ts';

export const LEAF_LIFETIME_MS = 90 * DAY;
const CA_LIFETIME_MS = 10 * 365 * DAY;
const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const CA_AAD = 'cdn_internal_ca:1';
type CryptoKey = webcrypto.CryptoKey;
/** @peculiar/x509 (with the reflect polyfill it needs) is loaded by the first issuance. */
const x509Module = lazy(async () => {
  await import('reflect-metadata');
  return import('@peculiar/x509');
});

export interface IssuedCertificate {
  chainPem: string;
  keyPem: string;
  expiresAt: Date;
  fingerprint: string;
  issuer: 'internal_ca' | 'acme';
}

/** Why a certificate could not be issued, in words shown on the domain (validation_error). */
export class IssuanceError extends Error {
  /** True when the ACME order cannot go on (a failed challenge): the next attempt opens a new one. */
  readonly orderClosed: boolean;
  constructor(message: string, orderClosed = false) {
    super(message);
    this.orderClosed = orderClosed;
  }
}

/** The DNS-01 TXT value to publish and the ACME order it belongs to (null: the internal CA, which needs no order). */
export interface ValidationStart {
  value: string;
  order: AcmeOrderRef | null;
  /** The CA holds a valid authorization already (ACME reuse): issuance needs no new record. */
  ready: boolean;
}

/** Issues managed certificates: the internal CA, or an ACME CA (acme-issuer.ts). */
export interface CertificateIssuer {
  readonly kind: 'internal_ca' | 'acme';
  /** Opens the validation of `hostname` (on creation and renewal). Throws IssuanceError. */
  startValidation(rc: RequestContext, hostname: string): Promise<ValidationStart>;
  /** Issues a certificate for a domain whose DNS records were checked (ACME: validates and finalizes `order`). Throws IssuanceError. */
  issue(rc: RequestContext, hostname: string, now: Date, order: AcmeOrderRef | null): Promise<IssuedCertificate>;
  /** Revokes a certificate it issued, where it can (the internal CA publishes no revocation). */
  revoke(rc: RequestContext, chainPem: string): Promise<void>;
}

const serial = () => {
  const bytes = randomBytes(16);
  bytes[0]! &= 0x7f; // a positive serial number
  return bytes.toString('hex');
};

async function exportKeyPem(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ type: 'pkcs8', format: 'pem' }) as string;
}

async function importKeyPem(pem: string): Promise<CryptoKey> {
  const der = createPrivateKey(pem).export({ type: 'pkcs8', format: 'der' });
  return webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, false, ['sign']);
}

/** The internal CA's certificate and signing key, made once (the first writer wins; others read its row). */
async function loadOrCreateCa(rc: RequestContext, box: SecretBox, now: Date): Promise<{ cert: X509.X509Certificate; key: CryptoKey }> {
  const x509 = await x509Module();
  let row = await rc.em.findOne(InternalCa, 1, { refresh: true });
  if (!row) {
    const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: serial(), name: 'CN=Streaming Platform CDN internal CA', notBefore: now, notAfter: new Date(now.getTime() + CA_LIFETIME_MS),
      keys, signingAlgorithm: ALGORITHM,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    }, webcrypto);
    await rc.em.execute(
      `insert into cdn_internal_ca (id, certificate_pem, private_key_sealed, created_at) values (1, ?, ?, ?) on conflict (id) do nothing`,
      [cert.toString('pem'), box.seal(await exportKeyPem(keys.privateKey), CA_AAD), now],
    );
    row = await rc.em.findOneOrFail(InternalCa, 1, { refresh: true });
  }
  return { cert: new x509.X509Certificate(row.certificate_pem), key: await importKeyPem(box.openString(row.private_key_sealed, CA_AAD)) };
}

/** A certificate of the internal CA for `names` (the first is the subject; all are DNS names, `*.zone` wildcards allowed). */
export async function issueFromInternalCa(rc: RequestContext, box: SecretBox, names: readonly string[], now: Date): Promise<IssuedCertificate & { caPem: string }> {
  const ca = await loadOrCreateCa(rc, box, now);
  const x509 = await x509Module();
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const expiresAt = new Date(now.getTime() + LEAF_LIFETIME_MS);
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: serial(), subject: `CN=${names[0]}`, issuer: ca.cert.subject, notBefore: new Date(now.getTime() - 60_000), notAfter: expiresAt,
    publicKey: keys.publicKey, signingKey: ca.key, signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value }))),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert, false, webcrypto),
    ],
  }, webcrypto);
  const parsed = new X509Certificate(leaf.toString('pem'));
  const caPem = new X509Certificate(ca.cert.toString('pem')).toString();
  return {
    chainPem: parsed.toString() + caPem,
    keyPem: await exportKeyPem(keys.privateKey),
    expiresAt: parsed.validToDate,
    fingerprint: parsed.fingerprint256,
    issuer: 'internal_ca',
    caPem,
  };
}

export function internalCaIssuer(box: SecretBox): CertificateIssuer {
  return {
    kind: 'internal_ca',
    // The value only proves the customer controls the name to this control plane (retry-validation looks it up).
    startValidation: async () => ({ value: randomBytes(32).toString('base64url'), order: null, ready: false }),
    revoke: async () => {},
    async issue(rc, hostname, now) {
      const { caPem: _, ...issued } = await issueFromInternalCa(rc, box, [hostname], now);
      return issued;
    },
  };
}
