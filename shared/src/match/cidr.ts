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
 * How an origin address is treated by the SSRF guard:
 * - `public`: globally routable unicast, always allowed;
 * - `private`: private-use networks operators run origins on: loopback,
 *   RFC 1918, CGNAT (100.64.0.0/10) and IPv6 unique-local (fc00::/7);
 * - `special`: everything else: link-local (169.254.0.0/16, fe80::/10, where
 *   cloud metadata services answer), cloud metadata addresses that sit inside
 *   private ranges (100.100.100.200, fd00:ec2::254), unspecified, multicast,
 *   broadcast, documentation/benchmarking/reserved ranges, and every IPv6
 *   form that embeds an IPv4 address but the mapped one (which is judged as
 *   the IPv4 address it carries): IPv4-compatible (::/96 but :: and ::1,
 *   deprecated by RFC 4291, which a stack may still dial as the IPv4 address),
 *   IPv4-translated (::ffff:0:0/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48),
 *   6to4 (2002::/16) and Teredo (2001::/32). Not an address at all counts as
 *   special.
 */
export type AddressClass = 'public' | 'private' | 'special';

const PRIVATE_USE = new Set(['loopback', 'private', 'carrierGradeNat', 'uniqueLocal']);
const METADATA = new Set(['100.100.100.200', 'fd00:ec2::254']);

export function addressClass(address: string): AddressClass {
  const addr = parseAddress(address);
  if (!addr) return 'special'; // not an address at all: refuse rather than guess
  // ipaddr.js calls global unicast (v4 and v6) "unicast", IPv4-compatible addresses (::7f00:1) included.
  const range = addr.range();
  if (range === 'unicast') return isIPv4Compatible(addr) ? 'special' : 'public';
  if (!PRIVATE_USE.has(range)) return 'special';
  return METADATA.has(addr.toString()) ? 'special' : 'private'; // toString() is the compact RFC 5952 form
}

/** ::/96 (the first 96 bits zero): the deprecated IPv4-compatible form, `::127.0.0.1` as URLs spell it `[::7f00:1]`. */
function isIPv4Compatible(addr: Address): boolean {
  if (addr.kind() !== 'ipv6') return false;
  const parts = (addr as ipaddr.IPv6).parts;
  return parts[0] === 0 && parts[1] === 0 && parts[2] === 0 && parts[3] === 0 && parts[4] === 0 && parts[5] === 0;
}

/** True for every address that is not globally routable unicast (private-use and special alike). */
export function isPrivateAddress(address: string): boolean {
  return addressClass(address) !== 'public';
}

/**
 * The SSRF guard's decision for one resolved origin address. Private-use
 * addresses need allow_private_network; special ones (link-local, metadata,
 * multicast...) need allow_private_network and ssrf_protection switched off
 * as well. ssrf_protection: false alone opens nothing.
 */
export function originAddressAllowed(address: string, allowPrivateNetwork: boolean, ssrfProtection: boolean): boolean {
  const cls = addressClass(address);
  if (cls === 'public') return true;
  if (!allowPrivateNetwork) return false;
  return cls === 'private' || !ssrfProtection;
}

/**
 * The canonical form of an IP range as rules store it: `address/bits`, IPv4
 * in four-part decimal (no octal or hex spellings), IPv6 in its compact RFC
 * 5952 form, an IPv4-mapped IPv6 range as the IPv4 range it carries, a bare
 * address as /32 or /128. A range with host bits set is refused (naming the
 * network it probably meant), not silently widened or narrowed.
 */
export function canonicalCidr(text: string): { cidr: string } | { problem: string } {
  const [addressText = '', bitsText, ...rest] = text.trim().split('/');
  const bad = { problem: 'Must be an IPv4 or IPv6 address or range such as 203.0.113.0/24 or 2001:db8::/32' };
  if (rest.length || (bitsText !== undefined && !/^\d{1,3}$/.test(bitsText))) return bad;
  let addr: Address;
  if (ipaddr.IPv4.isValidFourPartDecimal(addressText)) addr = ipaddr.IPv4.parse(addressText);
  else if (addressText.includes(':') && !addressText.includes('%') && ipaddr.IPv6.isValid(addressText)) addr = ipaddr.IPv6.parse(addressText);
  else return bad;
  const max = addr.kind() === 'ipv4' ? 32 : 128;
  let bits = bitsText === undefined ? max : Number(bitsText);
  if (bits > max) return { problem: `The prefix length must be at most ${max}` };
  if (addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress() && bits >= 96) {
    addr = (addr as ipaddr.IPv6).toIPv4Address();
    bits -= 96;
  }
  const network = addr.kind() === 'ipv4'
    ? ipaddr.IPv4.networkAddressFromCIDR(`${addr.toString()}/${bits}`)
    : ipaddr.IPv6.networkAddressFromCIDR(`${addr.toString()}/${bits}`);
  if (network.toString() !== addr.toString()) return { problem: `Host bits are set; the range is ${network.toString()}/${bits}` };
  return { cidr: `${addr.toString()}/${bits}` };
}
