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

/**
 * Why a path glob cannot be used, or null when it compiles: it must be an
 * absolute path (or `*` / `**`), without whitespace or control characters, with
 * balanced `{}` and `[]`, and compile to a matcher. The control plane refuses
 * such patterns at write time so the edge never receives one.
 */
export function pathGlobProblem(pattern: string): string | null {
  if (pattern === '*' || pattern === '**') return null;
  if (!pattern.startsWith('/')) return 'must start with "/" (or be "*")';
  if (/[\s\u0000-\u001f\u007f]/.test(pattern)) return 'must not contain whitespace or control characters';
  let braces = 0;
  let brackets = 0;
  for (const c of pattern) {
    if (c === '{') braces++;
    else if (c === '}' && --braces < 0) return 'has a "}" without its "{"';
    else if (c === '[') brackets++;
    else if (c === ']' && --brackets < 0) return 'has a "]" without its "["';
  }
  if (braces !== 0) return 'has an unclosed "{"';
  if (brackets !== 0) return 'has an unclosed "["';
  if (/\*{3,}/.test(pattern)) return 'has more than two "*" in a row';
  try {
    compilePathGlob(pattern)('/');
  } catch (error) {
    return `does not compile: ${(error as Error).message}`;
  }
  return null;
}
