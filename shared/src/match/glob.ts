// Path globs as the CDN API writes them: `*` matches within one segment,
// `**` across segments, `?` one character, `{a,b}` alternatives. A pattern
// ending in `/*` (the common "everything under") also matches deeper paths,
// which is what operators mean by "/videos/*". Compiled once per snapshot.
import picomatch from 'picomatch';

export type PathMatcher = (path: string) => boolean;

const matchAll: PathMatcher = () => true;

export function compilePathGlob(pattern: string): PathMatcher {
  if (pattern === '*' || pattern === '/*' || pattern === '/**' || pattern === '**') return matchAll;
  if (!/[*?{[]/.test(pattern)) return (path) => path === pattern;
  // Prefix patterns ("/videos/abc/*", "/videos/ab*") are by far the most common in purges: no regex needed.
  const star = pattern.indexOf('*');
  if (star === pattern.length - 1 && !/[?{[]/.test(pattern)) {
    const prefix = pattern.slice(0, -1);
    return (path) => path.startsWith(prefix);
  }
  // "/videos/*" → everything under /videos/ (any depth), like most CDN consoles.
  const source = pattern.endsWith('/*') && !pattern.endsWith('/**') ? pattern + '*' : pattern;
  const re = picomatch.makeRe(source, { dot: true, nobrace: false, noextglob: true });
  return (path) => re.test(path);
}

/** True if any pattern matches; an empty list matches everything. */
export function compilePathGlobs(patterns: readonly string[]): PathMatcher {
  if (patterns.length === 0) return matchAll;
  const matchers = patterns.map(compilePathGlob);
  if (matchers.length === 1) return matchers[0];
  return (path) => {
    for (const m of matchers) if (m(path)) return true;
    return false;
  };
}

/** The literal part of a glob before its first wildcard character. */
export function globLiteralPrefix(pattern: string): string {
  const i = pattern.search(/[*?{[]/);
  return i === -1 ? pattern : pattern.slice(0, i);
}
