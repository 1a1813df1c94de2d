// Host names and wildcards: "example.com" matches exactly, "*.example.com"
// matches any name with at least one more label (not the apex itself), "*"
// matches every host. Comparison is case-insensitive and ignores a port and a
// trailing dot.

export type HostMatcher = (host: string) => boolean;

/** Lower-cases, drops the port (also of [v6]:port) and a trailing dot. */
export function normalizeHost(raw: string): string {
  let host = raw;
  if (host.charCodeAt(0) === 91 /* [ */) {
    const end = host.indexOf(']');
    host = end === -1 ? host : host.slice(0, end + 1);
  } else {
    const colon = host.indexOf(':');
    if (colon !== -1) host = host.slice(0, colon);
  }
  if (host.endsWith('.')) host = host.slice(0, -1);
  // Fast path: most Host headers are already lower case.
  return /[A-Z]/.test(host) ? host.toLowerCase() : host;
}

export function compileHostPattern(pattern: string): HostMatcher {
  const p = normalizeHost(pattern.trim());
  if (p === '*') return () => true;
  if (p.startsWith('*.')) {
    const suffix = p.slice(1); // ".example.com"
    return (host) => host.length > suffix.length && host.endsWith(suffix);
  }
  return (host) => host === p;
}

/** True if any pattern matches; an empty list matches every host. */
export function compileHostPatterns(patterns: readonly string[]): HostMatcher {
  if (patterns.length === 0) return () => true;
  const exact = new Set<string>();
  const others: HostMatcher[] = [];
  for (const pattern of patterns) {
    const p = normalizeHost(pattern.trim());
    if (p.includes('*')) others.push(compileHostPattern(p));
    else exact.add(p);
  }
  return (host) => {
    if (exact.has(host)) return true;
    for (const m of others) if (m(host)) return true;
    return false;
  };
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

/**
 * Why a host pattern cannot be used, or null: `*`, `*.example.com` (a leading
 * wildcard label only) or a host name (letters, digits, `-`, `_` in labels of
 * at most 63, 253 in all); no port.
 */
export function hostPatternProblem(pattern: string): string | null {
  const p = pattern.trim().toLowerCase().replace(/\.$/, '');
  if (p === '*') return null;
  const name = p.startsWith('*.') ? p.slice(2) : p;
  if (name.includes('*')) return 'a wildcard may only be the whole first label ("*.example.com")';
  if (name.includes(':')) return 'must not carry a port';
  if (name.length === 0 || name.length > 253) return 'must be a host name of 1 to 253 characters';
  if (!name.split('.').every((label) => LABEL.test(label))) return 'must be a host name (letters, digits, "-" and "_" in dot-separated labels)';
  return null;
}
