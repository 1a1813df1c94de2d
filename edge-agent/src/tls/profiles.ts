// The TLS settings a name is served with (a "profile"): an endpoint's
// tls_config.minimum_protocol_version and cipher_policy, and the application
// protocols its http_version allows (ALPN). Names of endpoints with the same
// settings share one profile, and the HTTPS listener keeps one TLS server per
// profile in use.
//
// cipher_policy is a list of TLS 1.2 and older cipher suites (OpenSSL names);
// TLS 1.3's own suites (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305, all AEAD
// with forward secrecy) are offered under every policy:
// - modern: ECDHE key exchange with AEAD ciphers only (AES-GCM, ChaCha20-Poly1305).
// - recommended (the default): modern plus the same AEAD ciphers with DHE key
//   exchange (Mozilla's "intermediate" configuration, v5.7).
// - compatible: recommended plus CBC ciphers (SHA-1 and SHA-2 MACs) with ECDHE,
//   DHE and plain RSA key exchange (Mozilla's "old" configuration without
//   3DES). TLS 1.0 and 1.1 have no AEAD cipher, so a minimum below TLSv1.2
//   only admits such clients with this policy.
// A minimum below TLSv1.2 also lowers OpenSSL's security level to 0 for that
// profile (OpenSSL 3 refuses TLS 1.0/1.1's SHA-1 handshake signatures above it).
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';

export type TlsVersion = 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';
export type CipherPolicy = 'modern' | 'recommended' | 'compatible';

const MODERN = [
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
];
const RECOMMENDED = [...MODERN, 'DHE-RSA-AES128-GCM-SHA256', 'DHE-RSA-AES256-GCM-SHA384', 'DHE-RSA-CHACHA20-POLY1305'];
const COMPATIBLE = [
  ...RECOMMENDED,
  'ECDHE-ECDSA-AES128-SHA256', 'ECDHE-RSA-AES128-SHA256', 'ECDHE-ECDSA-AES128-SHA', 'ECDHE-RSA-AES128-SHA',
  'ECDHE-ECDSA-AES256-SHA384', 'ECDHE-RSA-AES256-SHA384', 'ECDHE-ECDSA-AES256-SHA', 'ECDHE-RSA-AES256-SHA',
  'DHE-RSA-AES128-SHA256', 'DHE-RSA-AES256-SHA256', 'AES128-GCM-SHA256', 'AES256-GCM-SHA384', 'AES128-SHA256', 'AES256-SHA256', 'AES128-SHA', 'AES256-SHA',
];

/** Each policy's cipher list (TLS 1.2 and older), as OpenSSL takes it. */
export const CIPHER_LISTS: Record<CipherPolicy, string> = {
  modern: MODERN.join(':'),
  recommended: RECOMMENDED.join(':'),
  compatible: COMPATIBLE.join(':'),
};

const VERSIONS: readonly TlsVersion[] = ['TLSv1', 'TLSv1.1', 'TLSv1.2', 'TLSv1.3'];

export interface TlsProfile {
  /** `<min>|<policy>|<alpn>`: names with equal keys share a TLS server. */
  readonly key: string;
  readonly minVersion: TlsVersion;
  readonly cipherPolicy: CipherPolicy;
  /** ALPN protocols offered, preferred first. */
  readonly alpn: readonly string[];
  /** The cipher string for OpenSSL (the policy's list, and the security level a minimum below TLS 1.2 needs). */
  readonly ciphers: string;
}

const profiles = new Map<string, TlsProfile>();

/** The (shared, immutable) profile of these settings; unknown values fall back to the defaults (the control plane allows only known ones). */
export function tlsProfile(minVersion: string, cipherPolicy: string, http2: boolean): TlsProfile {
  const min = (VERSIONS as readonly string[]).includes(minVersion) ? minVersion as TlsVersion : 'TLSv1.2';
  const policy: CipherPolicy = cipherPolicy in CIPHER_LISTS ? cipherPolicy as CipherPolicy : 'recommended';
  const alpn = http2 ? ['h2', 'http/1.1'] : ['http/1.1'];
  const key = `${min}|${policy}|${alpn.join(',')}`;
  let profile = profiles.get(key);
  if (profile === undefined) {
    const legacy = min === 'TLSv1' || min === 'TLSv1.1';
    profile = Object.freeze({ key, minVersion: min, cipherPolicy: policy, alpn: Object.freeze(alpn), ciphers: CIPHER_LISTS[policy] + (legacy ? ':@SECLEVEL=0' : '') });
    profiles.set(key, profile);
  }
  return profile;
}

/** Whether an endpoint's http_version lets it speak HTTP/2 (http2, http2and3: HTTP/3 is not available in Node). */
export const allowsHttp2 = (e: Pick<EndpointSnapshot, 'http_version'>) => e.http_version !== 'http1.1';

/** An endpoint's profile. */
export function endpointProfile(e: Pick<EndpointSnapshot, 'tls_config' | 'http_version'>, http2Available: boolean): TlsProfile {
  return tlsProfile(e.tls_config.minimum_protocol_version, e.tls_config.cipher_policy, http2Available && allowsHttp2(e));
}

/** The profile of a connection without a name the agent serves (no SNI): the defaults. */
export const defaultProfile = (http2Available: boolean) => tlsProfile('TLSv1.2', 'recommended', http2Available);
