// Request path normalisation (RFC 3986 §6.2.2): percent-encoded unreserved
// characters are decoded, the remaining percent-encodings upper-cased, and dot
// segments removed (§5.2.4). The result is what routes, cache rules, cache keys,
// purges and the origin all see, so "/static/%2e%2e/account" is "/account"
// everywhere. Paths that cannot be normalised safely are refused (null):
// encoded "/" or "\" (origins disagree on whether they separate segments), a
// raw "\" (some origins treat it as "/"), NUL, "#", malformed percent-encoding,
// and dot segments followed by ";" ("..;/" is ".." to some servlet containers).

/** Characters whose presence sends a path down the slow path: "%", "\", "#", NUL, or "." right after "/". */
function needsWork(path: string): boolean {
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i);
    if (c === 37 || c === 92 || c === 35 || c === 0 || (c === 46 && path.charCodeAt(i - 1) === 47)) return true;
  }
  return false;
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 65 && c <= 70) return c - 55;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

function isUnreserved(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 45 || c === 46 || c === 95 || c === 126;
}

const HEX = '0123456789ABCDEF';

/**
 * The normalised form of an absolute path ("/..."), or null when it cannot be
 * normalised safely. Already-normal paths are returned as given (one scan, no
 * allocation).
 */
export function normalizePath(path: string): string | null {
  if (path.charCodeAt(0) !== 47) return null;
  if (!needsWork(path)) return path;
  let decoded = '';
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i);
    if (c === 92 || c === 35 || c === 0) return null;
    if (c !== 37) {
      decoded += path[i];
      continue;
    }
    const hi = hexValue(path.charCodeAt(i + 1));
    const lo = hexValue(path.charCodeAt(i + 2));
    if (hi < 0 || lo < 0) return null;
    const byte = hi * 16 + lo;
    if (byte === 0x2f || byte === 0x5c || byte === 0) return null;
    decoded += isUnreserved(byte) ? String.fromCharCode(byte) : '%' + HEX[hi] + HEX[lo];
    i += 2;
  }
  return removeDotSegments(decoded);
}

/** RFC 3986 §5.2.4 for an absolute path; null when a dot segment carries a ";" parameter. */
function removeDotSegments(path: string): string | null {
  const segments = path.split('/');
  const out: string[] = [];
  const last = segments.length - 1;
  for (let i = 1; i <= last; i++) {
    const s = segments[i];
    if (s === '.' || s === '..') {
      if (s === '..' && out.length > 0) out.pop();
      if (i === last) out.push('');
      continue;
    }
    if (s.startsWith('.;') || s.startsWith('..;')) return null;
    out.push(s);
  }
  return '/' + out.join('/');
}
