// An origin's host at write time: parsed and normalised, then refused when it
// is, or resolves to, an address the edge would not dial (SSRF). The address
// classes and the decision are the edge's own (shared/src/match/cidr.ts:
// addressClass, originAddressAllowed), so the API and the dial-time guard can
// never disagree about which addresses are private.
import { lookup } from 'node:dns/promises';
import { isIPv6 } from 'node:net';
import { parseAuthority } from '../../../shared/src/match/authority.ts';
import { addressClass, originAddressAllowed, parseAddress } from '../../../shared/src/match/cidr.ts';

/** Resolves a host name to its addresses (empty: no answer). */
export type HostLookup = (host: string, timeoutMs: number) => Promise<string[]>;

/** getaddrinfo (as the edge dials) with a deadline; no answer, an error or the deadline → []. */
export const systemHostLookup: HostLookup = async (host, timeoutMs) => {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<string[]>((resolve) => { timer = setTimeout(() => resolve([]), timeoutMs); });
  try {
    return await Promise.race([
      lookup(host, { all: true, verbatim: true }).then((found) => found.map((a) => a.address), () => []),
      deadline,
    ]);
  } finally {
    clearTimeout(timer);
  }
};

/**
 * The stored form of a host: a DNS name lower-cased without its trailing dot,
 * or an IP literal in its canonical form, whatever spelling it came in
 * (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1` → `127.0.0.1`; `[::1]` and
 * `::ffff:127.0.0.1` → `::1`, `127.0.0.1`), so what is stored is what the edge
 * dials and what the check judged. null: not a host.
 */
export function normaliseOriginHost(raw: string): string | null {
  const text = raw.trim();
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  if (bare.includes(':')) {
    if (!isIPv6(bare) || bare.includes('%')) return null;
    return parseAddress(bare)!.toString();
  }
  const authority = parseAuthority(text);
  if (!authority || authority.host === '' || authority.port !== null) return null;
  const literal = parseAddress(authority.host);
  return literal ? literal.toString() : authority.host;
}

export interface HostVerdict {
  /** The address that made the host refused, and its class. */
  address: string;
  kind: 'private' | 'special';
}

const LOCALHOST = /(^|\.)localhost$/;

/**
 * Why the edge would refuse to dial this (normalised) host, or null. IP
 * literals are judged as they are; `localhost` and `*.localhost` are loopback
 * (RFC 6761) without asking DNS; other names are resolved and refused if any
 * address they resolve to is refused. A name that does not resolve (or not
 * in time) is accepted: DNS may be configured later, and the edge checks every
 * address again when it dials.
 */
export async function originHostRefusal(
  host: string,
  flags: { allow_private_network: boolean; ssrf_protection: boolean },
  resolve: HostLookup,
  timeoutMs: number,
): Promise<HostVerdict | null> {
  if (flags.allow_private_network && !flags.ssrf_protection) return null; // every address is allowed: nothing to look up
  const literal = parseAddress(host);
  const addresses = literal ? [literal.toString()] : LOCALHOST.test(host) ? ['127.0.0.1', '::1'] : await resolve(host, timeoutMs);
  for (const address of addresses) {
    if (!originAddressAllowed(address, flags.allow_private_network, flags.ssrf_protection)) {
      return { address, kind: addressClass(address) === 'private' ? 'private' : 'special' };
    }
  }
  return null;
}
