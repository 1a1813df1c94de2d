// Whether the edge can serve a certificate and key (issue: RSA-1024, secp256k1 and brainpool certificates were
// accepted, reported healthy and never served). One check for the control plane, where a custom certificate is
// uploaded or replaced (a refusal is a 422) and a configuration rollback restores one, and for the edge agent,
// where a custom pair is loaded. The key types are the ones every mainstream client accepts in a server
// certificate, as the CA/Browser Forum's Baseline Requirements (§6.1.5) allow them: RSA of at least 2048 bits,
// or ECDSA on P-256 or P-384 (P-521 is left out: Chrome dropped it from its TLS 1.3 signature algorithms, and no
// public CA issues it). Then the pair must load as the edge loads it (tls.createSecureContext).
import { X509Certificate } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';

/** The smallest RSA modulus served. */
export const MIN_RSA_BITS = 2048;
/** The ECDSA curves served, by OpenSSL's names (P-256, P-384). */
export const SERVABLE_CURVES: ReadonlyMap<string, string> = new Map([['prime256v1', 'P-256'], ['secp384r1', 'P-384']]);

const FIRST_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/;

/** Why the leaf's key is of a type the edge does not serve, or undefined when it is one it does. */
function keyTypeProblem(leaf: X509Certificate): string | undefined {
  const key = leaf.publicKey;
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'rsa') {
    const bits = details.modulusLength ?? 0;
    return bits >= MIN_RSA_BITS ? undefined : `an RSA key of ${bits} bits is too short to serve (at least ${MIN_RSA_BITS})`;
  }
  if (key.asymmetricKeyType === 'ec') {
    const curve = details.namedCurve ?? 'an unnamed curve';
    return SERVABLE_CURVES.has(curve) ? undefined : `an ECDSA key on ${curve} is not served (curves served: ${[...SERVABLE_CURVES.values()].join(', ')})`;
  }
  return `a ${key.asymmetricKeyType ?? 'unknown'} key is not served`;
}

/**
 * The TLS context the edge serves this chain (leaf first) and key with, or why it cannot, in a sentence: the
 * leaf's key must be RSA ≥ 2048 bits or ECDSA P-256/P-384, and the pair must load into a TLS context.
 */
export function servableContext(certificatePem: string, privateKeyPem: string): { context: SecureContext; problem?: undefined } | { problem: string; context?: undefined } {
  const first = certificatePem.match(FIRST_CERTIFICATE);
  if (!first) return { problem: 'The certificate is not PEM' };
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(first[0]);
  } catch {
    return { problem: 'The certificate cannot be parsed' };
  }
  const keyType = keyTypeProblem(leaf);
  if (keyType) return { problem: `The edge cannot serve this certificate: ${keyType}; use RSA (${MIN_RSA_BITS} bits or more) or ECDSA P-256 or P-384` };
  try {
    return { context: createSecureContext({ cert: certificatePem, key: privateKeyPem }) };
  } catch (error) {
    return { problem: `The edge cannot load this certificate and key (${String((error as Error).message).split('\n')[0]})` };
  }
}

/** Why the edge cannot serve this chain and key (servableContext), or undefined when it can. */
export const unservableReason = (certificatePem: string, privateKeyPem: string): string | undefined =>
  servableContext(certificatePem, privateKeyPem).problem;
