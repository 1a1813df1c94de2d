// Which certificate and TLS settings each name is served with, compiled from
// the configuration in force and the agent's default certificate:
// - a custom domain: its own certificate (custom, or managed once issued; the
//   snapshot carries only validated domains with their chain and key);
// - an endpoint's CDN hostname: the default certificate (TLS_CERT_FILE /
//   TLS_KEY_FILE, the wildcard `*.CDN_DOMAIN`) when it covers the name;
// each with its endpoint's profile (profiles.ts). Rebuilt with every
// configuration and every reload of the default certificate, and read on
// every handshake, so a replaced certificate is served from the next one while
// open connections keep theirs. Secure contexts are kept per certificate and
// key (by their hash) so an unchanged certificate is not parsed again.
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { ConfigSnapshot, EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { normalizeHost } from '../../../shared/src/match/host.ts';
import { servableContext } from '../../../shared/src/tls/servable.ts';
import { defaultProfile, endpointProfile, type TlsProfile } from './profiles.ts';

/** A PEM certificate chain (leaf first) and its private key. */
export interface CertificatePair {
  certPem: string;
  keyPem: string;
}

export interface TlsName {
  readonly context: SecureContext;
  readonly profile: TlsProfile;
  /**
   * Names served by one certificate and profile share a group ("default": the default certificate; otherwise
   * the custom domain's own name). A connection may carry requests for any name of its group (HTTP/2
   * connection reuse, RFC 9113 §9.1.1), and for no other (421).
   */
  readonly group: string;
}

/** The default certificate, parsed once: its context and the names it covers. */
export class DefaultCertificate {
  readonly context: SecureContext;
  readonly x509: X509Certificate;
  readonly fingerprint: string;
  readonly pair: CertificatePair;

  constructor(pair: CertificatePair) {
    this.pair = pair;
    this.context = createSecureContext({ cert: pair.certPem, key: pair.keyPem });
    this.x509 = new X509Certificate(pair.certPem);
    this.fingerprint = this.x509.fingerprint256;
  }

  covers(name: string): boolean {
    return this.x509.checkHost(name, { subject: 'default', wildcards: true, partialWildcards: false, singleLabelSubdomains: false }) !== undefined;
  }
}

const pairHash = (certPem: string, keyPem: string) => createHash('sha256').update(certPem).update('\0').update(keyPem).digest('hex');

export class CertificateTable {
  private byName = new Map<string, TlsName>();
  private contexts = new Map<string, SecureContext>();
  private defaultCert: DefaultCertificate | null = null;
  private snapshot: ConfigSnapshot | null = null;
  /** Each endpoint entry's names as last built (an unchanged entry is the same object: a delta rebuilds only what changed). */
  private perEndpoint = new WeakMap<EndpointSnapshot, [name: string, tls: TlsName, pairHash: string | null][]>();
  private readonly http2: boolean;
  /** Why names of the last build have no certificate (a custom domain whose pair does not load). */
  problems: string[] = [];

  constructor(options: { http2: boolean }) {
    this.http2 = options.http2;
  }

  /** The certificate served without SNI and to CDN hostnames it covers (null: none). */
  get default(): DefaultCertificate | null {
    return this.defaultCert;
  }

  get defaultProfile(): TlsProfile {
    return defaultProfile(this.http2);
  }

  /** The name's certificate and settings; undefined when the agent has no certificate for it. */
  lookup(name: string): TlsName | undefined {
    return this.byName.get(name);
  }

  /** Names with a certificate. */
  get size(): number {
    return this.byName.size;
  }

  /** Replaces the default certificate (TLS_CERT_FILE / TLS_KEY_FILE, read again on SIGHUP or when they change). */
  setDefault(cert: DefaultCertificate | null): void {
    this.defaultCert = cert;
    this.perEndpoint = new WeakMap();
    if (this.snapshot !== null) this.build(this.snapshot);
  }

  /** Rebuilds the table for a configuration (called with every configuration applied). */
  build(snapshot: ConfigSnapshot): void {
    this.snapshot = snapshot;
    const byName = new Map<string, TlsName>();
    const contexts = new Map<string, SecureContext>();
    const problems: string[] = [];
    const def = this.defaultCert;
    for (const e of snapshot.endpoints) {
      let names = this.perEndpoint.get(e);
      if (names === undefined) {
        names = [];
        const profile = endpointProfile(e, this.http2);
        const hostname = normalizeHost(e.hostname);
        if (def !== null && def.covers(hostname)) names.push([hostname, { context: def.context, profile, group: 'default' }, null]);
        for (const d of e.custom_domains) {
          const name = normalizeHost(d.hostname);
          const loaded = this.domainContext(e, d, contexts, problems);
          if (loaded !== null) names.push([name, { context: loaded.context, profile, group: `domain:${name}` }, loaded.hash]);
        }
        this.perEndpoint.set(e, names);
      } else {
        for (const [, n, hash] of names) if (hash !== null) contexts.set(hash, n.context);
      }
      for (const [name, n] of names) byName.set(name, n);
    }
    this.byName = byName;
    this.contexts = contexts;
    this.problems = problems;
  }

  private domainContext(
    e: EndpointSnapshot, d: EndpointSnapshot['custom_domains'][number], into: Map<string, SecureContext>, problems: string[],
  ): { context: SecureContext; hash: string } | null {
    if (!d.certificate_pem || !d.private_key_pem) return null;
    const hash = pairHash(d.certificate_pem, d.private_key_pem);
    let context = into.get(hash) ?? this.contexts.get(hash);
    if (context === undefined) {
      // The control plane's own check (a pair it refused, e.g. from an older configuration, is not served).
      const loaded = servableContext(d.certificate_pem, d.private_key_pem);
      if (!loaded.context) {
        problems.push(`endpoint ${e.id}: custom domain ${d.hostname}: ${loaded.problem}`);
        return null;
      }
      context = loaded.context;
    }
    into.set(hash, context);
    return { context, hash };
  }

  /**
   * Whether a request for `host` may be answered on a connection whose TLS handshake asked for `servername`
   * (false: no SNI): the same name, or a name of the same group and profile. Otherwise the request was
   * misdirected (421): another name's certificate or TLS settings (a stricter minimum version) would apply.
   */
  sameConnection(servername: string | null, host: string): boolean {
    if (servername !== null && servername === host) return true;
    const target = this.byName.get(host);
    if (target === undefined) return false;
    if (servername === null) return target.group === 'default' && target.profile === this.defaultProfile;
    const origin = this.byName.get(servername);
    return origin !== undefined && origin.group === target.group && origin.profile === target.profile;
  }
}

/**
 * Reads the default certificate's files (TLS_CERT_FILE: PEM chain, leaf first; TLS_KEY_FILE: its unencrypted
 * key). Throws with the reason when they cannot serve: unreadable, not PEM, or a key that is not the leaf's.
 */
export function readCertificateFiles(certFile: string, keyFile: string, read: (file: string) => string): DefaultCertificate {
  const certPem = read(certFile);
  const keyPem = read(keyFile);
  if (!certPem.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${certFile} holds no PEM certificate`);
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(certPem);
  } catch (err) {
    throw new Error(`${certFile}: ${(err as Error).message}`);
  }
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch (err) {
    throw new Error(`${keyFile}: ${(err as Error).message}`);
  }
  if (!leaf.checkPrivateKey(key)) throw new Error(`${keyFile} is not the key of the first certificate in ${certFile}`);
  return new DefaultCertificate({ certPem, keyPem });
}
