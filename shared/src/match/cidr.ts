// CIDR and address-range checks on ipaddr.js. IPv4-mapped IPv6 addresses
// (::ffff:10.0.0.1) are treated as the IPv4 address they carry, so a v4 rule
// or the private-range guard cannot be side-stepped by the v6 spelling.
import ipaddr from 'ipaddr.js';

export type Address = ipaddr.IPv4 | ipaddr.IPv6;

export function parseAddress(text: string): Address | null {
  if (!ipaddr.isValid(text)) return null;
  const addr = ipaddr.parse(text);
  if (addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress()) {
    return (addr as ipaddr.IPv6).toIPv4Address();
  }
  return addr;
}

export type CidrMatcher = (address: string) => boolean;

/** Compiles "10.0.0.0/8", "2001:db8::/32" or a bare address (/32 or /128). Throws on bad input. */
export function compileCidr(cidr: string): CidrMatcher {
  const text = cidr.trim();
  let range: [Address, number];
  if (text.includes('/')) {
    const [addr, bits] = ipaddr.parseCIDR(text);
    range = [addr, bits];
  } else {
    const addr = parseAddress(text);
    if (!addr) throw new Error(`invalid address: ${text}`);
    range = [addr, addr.kind() === 'ipv4' ? 32 : 128];
  }
  if (range[0].kind() === 'ipv6' && (range[0] as ipaddr.IPv6).isIPv4MappedAddress() && range[1] >= 96) {
    range = [(range[0] as ipaddr.IPv6).toIPv4Address(), range[1] - 96];
  }
  const kind = range[0].kind();
  return (address) => {
    const addr = parseAddress(address);
    if (!addr || addr.kind() !== kind) return false;
    return addr.match(range);
  };
}

export function isValidCidr(cidr: string): boolean {
  try {
    compileCidr(cidr);
    return true;
  } catch {
    return false;
  }
}

/**
 * True for addresses an origin fetch must not reach unless the origin allows
 * private networks: loopback, RFC 1918, link-local, unique-local, CGNAT,
 * unspecified, multicast, broadcast and reserved ranges. Only globally routable
 * unicast passes.
 */
export function isPrivateAddress(address: string): boolean {
  const addr = parseAddress(address);
  if (!addr) return true; // not an address at all: refuse rather than guess
  const range = addr.range();
  if (addr.kind() === 'ipv6') {
    // ipaddr.js calls global v6 unicast "unicast"; 6to4/teredo can embed private v4.
    return range !== 'unicast';
  }
  return range !== 'unicast';
}
