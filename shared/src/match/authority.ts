// The authority of a request (RFC 9110 §7.2 Host, RFC 3986 §3.2): host name or
// IP literal, optional port. Parsed strictly, because the agent keys and
// forwards exactly what it parsed: a value that is not a DNS name, an IPv4
// address or a bracketed IPv6 address, or whose port is not 1–65535, is
// malformed (the caller answers 400).
import { isIPv6 } from 'node:net';

export interface Authority {
  /** Lower case, no trailing dot; IPv6 literals keep their brackets. Empty for an empty authority. */
  host: string;
  /** null when absent. */
  port: number | null;
}

const MAX_NAME = 253;
const MAX_LABEL = 63;

/**
 * Parses a Host field value or a URI authority. Accepts host names made of
 * letters, digits, "-" and "_" in dot-separated labels (one trailing dot
 * allowed), IPv4 addresses (the same grammar) and bracketed IPv6 addresses;
 * a port of 1–5 digits, 1–65535. Userinfo, percent-encoding, other characters,
 * an empty port or an empty label: null.
 */
export function parseAuthority(raw: string): Authority | null {
  const len = raw.length;
  if (len === 0) return { host: '', port: null };
  let hostEnd: number;
  let host: string;
  if (raw.charCodeAt(0) === 91 /* [ */) {
    const close = raw.indexOf(']');
    if (close === -1) return null;
    const inner = raw.slice(1, close);
    if (!isIPv6(inner) || inner.includes('%')) return null; // no zone ids in an authority
    hostEnd = close + 1;
    host = '[' + inner.toLowerCase() + ']';
  } else {
    let label = 0;
    let upper = false;
    let i = 0;
    for (; i < len; i++) {
      const c = raw.charCodeAt(i);
      if (c === 58 /* : */) break;
      if (c === 46 /* . */) {
        if (label === 0) return null; // empty label (leading dot or "..")
        label = 0;
        continue;
      }
      if (c >= 97 && c <= 122) { /* a-z */ } else if (c >= 65 && c <= 90) upper = true;
      else if (!((c >= 48 && c <= 57) || c === 45 /* - */ || c === 95 /* _ */)) return null;
      if (++label > MAX_LABEL) return null;
    }
    hostEnd = i;
    if (hostEnd === 0) return null;
    host = raw.slice(0, hostEnd);
    if (host.charCodeAt(hostEnd - 1) === 46) host = host.slice(0, -1); // one trailing dot (the loop refused two)
    if (host.length > MAX_NAME) return null;
    if (upper) host = host.toLowerCase();
  }
  if (hostEnd === len) return { host, port: null };
  if (raw.charCodeAt(hostEnd) !== 58 /* : */) return null;
  const digits = len - hostEnd - 1;
  if (digits < 1 || digits > 5) return null;
  let port = 0;
  for (let i = hostEnd + 1; i < len; i++) {
    const d = raw.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return null;
    port = port * 10 + d;
  }
  if (port < 1 || port > 65535) return null;
  return { host, port };
}

/** host, or host:port when the port is not the scheme's default (what the agent keys and forwards). */
export function formatAuthority(a: Authority, defaultPort: number): string {
  return a.port === null || a.port === defaultPort ? a.host : a.host + ':' + a.port;
}
