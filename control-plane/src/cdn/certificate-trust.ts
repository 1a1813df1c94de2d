// The CAs a custom certificate must chain to (issue: a self-signed certificate claimed any hostname). A
// certificate from a CA that checks control of the names it signs proves the uploader controls the hostname,
// as a managed domain's DNS validation does; one that chains to no trusted CA proves nothing and is refused.
// Trusted: Node's bundled Mozilla roots (tls.rootCertificates), the operating system's store (OpenSSL's
// default locations, /etc/ssl/certs on Debian: tls.getCACertificates('system')), and the operator's PEM file
// CUSTOM_CERT_CA_FILE (a private PKI). As RFC 5280 §6.1 treats a trust anchor, a root is trusted by its name
// and key (its own validity dates are not checked); every certificate of the uploaded chain is checked.
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export interface TrustStore {
  /** The trusted CA that issued and signed `top` (the last certificate of a chain), or `top` itself when it is one. */
  anchorFor(top: X509Certificate): X509Certificate | undefined;
}

export interface TrustSources {
  /** CUSTOM_CERT_CA_FILE: PEM certificates of CAs trusted beside the public ones. */
  caFile?: string;
  /** Node's bundled roots and the operating system's store (true unless a test builds a store of its file alone). */
  publicRoots?: boolean;
}

/** PEM certificates of the sources, each once. */
function trustedPems(sources: TrustSources): string[] {
  const pems: string[] = [];
  if (sources.publicRoots !== false) pems.push(...tls.rootCertificates, ...tls.getCACertificates('system'));
  if (sources.caFile) pems.push(...(readFileSync(sources.caFile, 'utf8').match(PEM_BLOCK) ?? []));
  return [...new Set(pems.map((p) => p.trim()))];
}

/** A store read from its sources on first use (a few hundred roots are parsed once per process), indexed by subject. */
export function trustStore(sources: TrustSources): TrustStore {
  let bySubject: Map<string, X509Certificate[]> | undefined;
  const index = () => {
    if (bySubject) return bySubject;
    bySubject = new Map();
    for (const pem of trustedPems(sources)) {
      let cert: X509Certificate;
      try {
        cert = new X509Certificate(pem);
      } catch {
        continue; // a damaged entry of a system store trusts nothing
      }
      if (!cert.ca) continue;
      bySubject.set(cert.subject, [...(bySubject.get(cert.subject) ?? []), cert]);
    }
    return bySubject;
  };
  return {
    anchorFor(top) {
      const candidates = index().get(top.issuer) ?? [];
      return candidates.find((ca) => ca.fingerprint256 === top.fingerprint256) ?? candidates.find((ca) => top.checkIssued(ca) && top.verify(ca.publicKey));
    },
  };
}
