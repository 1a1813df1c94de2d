// Who the viewer is, for the request policies (IP rules, geo restriction,
// IP-bound signed URLs) and the access record: the socket's peer address, or,
// only when the node is configured to trust a proxy in front of it
// (TRUST_PROXY_HEADER with TRUSTED_PROXY_CIDRS) and the peer is one of those
// proxies, the address that proxy reports. Addresses are parsed once into the
// numeric form the prefix tables and the country database read.
import type { IncomingMessage } from 'node:http';
import { canonicalCidr } from '../../../shared/src/match/cidr.ts';

/** A client address: canonical text (IPv4-mapped IPv6 as IPv4) and its 32 or 128 bits as big-endian 32-bit words. */
export interface ClientAddress {
  text: string;
  v4: boolean;
  words: Uint32Array;
}

function parseV4(text: string, from = 0, to = text.length): number {
  let value = 0;
  let parts = 0;
  let part = -1;
  for (let i = from; i <= to; i++) {
    const c = i === to ? 46 : text.charCodeAt(i);
    if (c === 46) {
      if (part < 0 || parts === 4) return -1;
      value = value * 256 + part;
      parts++;
      part = -1;
    } else if (c >= 48 && c <= 57) {
      if (part === 0) return -1; // no leading zeros: "010" is not decimal to everyone
      part = part < 0 ? c - 48 : part * 10 + (c - 48);
      if (part > 255) return -1;
    } else return -1;
  }
  return parts === 4 ? value : -1;
}

function hex(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** IPv6 text (compressed, with an IPv4 tail, a zone id dropped) into 8 groups, or null. */
function parseV6Groups(text: string): number[] | null {
  const zone = text.indexOf('%');
  const s = zone === -1 ? text : text.slice(0, zone);
  const double = s.indexOf('::');
  if (double !== -1 && s.indexOf('::', double + 1) !== -1) return null;
  const parseSide = (side: string, allowV4Tail: boolean): number[] | null => {
    if (side === '') return [];
    const parts = side.split(':');
    const out: number[] = [];
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (allowV4Tail && i === parts.length - 1 && p.includes('.')) {
        const v4 = parseV4(p);
        if (v4 < 0) return null;
        out.push(v4 >>> 16, v4 & 0xffff);
        continue;
      }
      if (p.length === 0 || p.length > 4) return null;
      let v = 0;
      for (let j = 0; j < p.length; j++) {
        const h = hex(p.charCodeAt(j));
        if (h < 0) return null;
        v = v * 16 + h;
      }
      out.push(v);
    }
    return out;
  };
  if (double === -1) {
    const groups = parseSide(s, true);
    return groups !== null && groups.length === 8 ? groups : null;
  }
  const head = parseSide(s.slice(0, double), false);
  const tail = parseSide(s.slice(double + 2), true);
  if (head === null || tail === null || head.length + tail.length > 7) return null;
  return [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

const v6Text = (g: number[]): string => {
  // RFC 5952: the longest run (of two or more) of zero groups becomes "::", lower-case hex, no leading zeros.
  let bestAt = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) { bestAt = i; bestLen = j - i; }
    i = j;
  }
  const hexes = g.map((x) => x.toString(16));
  if (bestAt === -1) return hexes.join(':');
  return `${hexes.slice(0, bestAt).join(':')}::${hexes.slice(bestAt + bestLen).join(':')}`;
};

const v4Text = (v: number) => `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`;

/**
 * Parses an IPv4 or IPv6 address as a socket reports it or a proxy header
 * carries it (IPv6 possibly in brackets or with a zone id). IPv4-mapped IPv6
 * addresses (::ffff:a.b.c.d, what a dual-stack listener reports for IPv4
 * viewers) are their IPv4 address. Null for anything else.
 */
export function parseClientAddress(input: string): ClientAddress | null {
  let text = input;
  if (text.length === 0) return null;
  const v4 = parseV4(text);
  if (v4 >= 0) return { text, v4: true, words: Uint32Array.of(v4) };
  // What a dual-stack listener reports for every IPv4 viewer: no need for the general IPv6 parse.
  if (text.startsWith('::ffff:') && text.includes('.')) {
    const mapped = parseV4(text, 7);
    if (mapped >= 0) return { text: text.slice(7), v4: true, words: Uint32Array.of(mapped) };
  }
  if (text.charCodeAt(0) === 91 /* [ */ && text.charCodeAt(text.length - 1) === 93) text = text.slice(1, -1);
  if (!text.includes(':')) return null;
  const g = parseV6Groups(text);
  if (g === null) return null;
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
    const mapped = ((g[6]! << 16) | g[7]!) >>> 0;
    return { text: v4Text(mapped), v4: true, words: Uint32Array.of(mapped) };
  }
  const words = Uint32Array.of(((g[0]! << 16) | g[1]!) >>> 0, ((g[2]! << 16) | g[3]!) >>> 0, ((g[4]! << 16) | g[5]!) >>> 0, ((g[6]! << 16) | g[7]!) >>> 0);
  return { text: v6Text(g), v4: false, words };
}

/** A range as parsed from canonicalCidr's text: the address's words and the prefix length. */
export interface ParsedRange {
  v4: boolean;
  words: Uint32Array;
  bits: number;
}

/** A range in the canonical form IP rules are stored in (shared canonicalCidr: the control plane's check); throws with its problem. */
export function parseRange(text: string): ParsedRange {
  const canonical = canonicalCidr(text);
  if ('problem' in canonical) throw new Error(`${JSON.stringify(text)}: ${canonical.problem}`);
  const slash = canonical.cidr.lastIndexOf('/');
  const address = parseClientAddress(canonical.cidr.slice(0, slash));
  if (address === null) throw new Error(`${JSON.stringify(text)}: not an address`);
  return { v4: address.v4, words: address.words, bits: Number(canonical.cidr.slice(slash + 1)) };
}

/** Whether an address lies in a range (same family, the first `bits` bits equal). */
export function inRange(address: ClientAddress, range: ParsedRange): boolean {
  if (address.v4 !== range.v4) return false;
  let bits = range.bits;
  for (let w = 0; bits > 0; w++, bits -= 32) {
    const mask = bits >= 32 ? 0xffffffff : ~(0xffffffff >>> bits) >>> 0;
    if (((address.words[w]! ^ range.words[w]!) & mask) >>> 0 !== 0) return false;
  }
  return true;
}

export interface TrustedProxy {
  /** Lower-case request header carrying the client address (x-forwarded-for, x-real-ip, ...). */
  header: string;
  /** Peers allowed to set it. */
  proxies: ParsedRange[];
}

/** The viewer as the request policies see it (read-only: one may be shared by a connection's requests). */
export interface Viewer {
  address: ClientAddress | null;
  /** Reached the edge over TLS (this socket, or the trusted proxy's X-Forwarded-Proto). */
  secure: boolean;
}

const isTrusted = (a: ClientAddress | null, trust: TrustedProxy) => a !== null && trust.proxies.some((r) => inRange(a, r));

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(',') : v;
}

const PEER = Symbol('viewer of the connection');

/**
 * The socket's peer, parsed once per connection (every request of a
 * keep-alive connection, every stream of an HTTP/2 session, comes from the
 * same address) and shared, read-only, by its requests.
 */
function peerOf(req: IncomingMessage): Viewer {
  const socket = req.socket as IncomingMessage['socket'] & { [PEER]?: Viewer; encrypted?: boolean };
  let viewer = socket[PEER];
  if (viewer === undefined) viewer = socket[PEER] = { address: parseClientAddress(socket.remoteAddress ?? ''), secure: socket.encrypted === true };
  return viewer;
}

/**
 * The viewer's address and scheme. Without a trusted proxy: the socket's
 * peer. With one, and only when the peer is inside TRUSTED_PROXY_CIDRS: the
 * header's address: for a list (X-Forwarded-For), the rightmost entry that is
 * not itself a trusted proxy (entries further left were written by whoever
 * the client is, so they prove nothing); a missing or malformed header leaves
 * the peer's address.
 */
export function resolveViewer(req: IncomingMessage, trust: TrustedProxy | null): Viewer {
  const socketViewer = peerOf(req);
  const peer = socketViewer.address;
  if (trust === null || !isTrusted(peer, trust)) return socketViewer;
  let secure = socketViewer.secure;
  const proto = headerValue(req, 'x-forwarded-proto');
  if (proto !== undefined) secure = proto.split(',')[0]!.trim().toLowerCase() === 'https';
  const value = headerValue(req, trust.header);
  if (value === undefined) return { address: peer, secure };
  const entries = value.split(',');
  for (let i = entries.length - 1; i >= 0; i--) {
    const candidate = parseClientAddress(entries[i]!.trim());
    if (candidate === null) return { address: peer, secure };
    if (i === 0 || !isTrusted(candidate, trust)) return { address: candidate, secure };
  }
  return { address: peer, secure };
}

/** TRUST_PROXY_HEADER / TRUSTED_PROXY_CIDRS as the agent takes them; throws naming a bad range. */
export function trustedProxy(header: string | undefined, cidrs: string | undefined): TrustedProxy | null {
  if (!header) return null;
  const proxies = (cidrs ?? '').split(',').map((c) => c.trim()).filter(Boolean).map(parseRange);
  if (proxies.length === 0) throw new Error('TRUSTED_PROXY_CIDRS must name the proxies allowed to set the header');
  return { header: header.trim().toLowerCase(), proxies };
}
