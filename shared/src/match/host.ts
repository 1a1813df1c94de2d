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
