// Geo restriction (document 3 Endpoint.geo_restriction): an allowlist or a
// blocklist of ISO 3166-1 countries decided on the client address's country.
// The country database is the one in package.json (@ip-location-db/
// geolite2-country: address ranges as CSV, start,end,country), read once per
// agent process, only when some endpoint first enables geo restriction, and
// shared by every endpoint: sorted typed arrays (about 12 MB for 600,000
// ranges) searched by bisection. Addresses in no range (loopback, private
// and link-local networks, unallocated space) have no country and are never
// refused by geo restriction, allowlist or blocklist: they do not come from
// the public internet, and an edge behind a load balancer sees those unless
// the proxy header is trusted. VPN or proxy detection is not done.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import type { ClientAddress } from './client-address.ts';
import { forbidden } from './answers.ts';
import type { RequestPolicy } from './index.ts';

interface RangeTable {
  /** Range starts and ends, `width` 32-bit words each, sorted by start. */
  starts: Uint32Array;
  ends: Uint32Array;
  /** Two ASCII letters per range: (first << 8) | second. */
  codes: Uint16Array;
  width: number;
  count: number;
}

function compareAt(a: Uint32Array, at: number, b: Uint32Array, width: number): number {
  for (let w = 0; w < width; w++) {
    const x = a[at * width + w]!;
    const y = b[w]!;
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

function lookup(table: RangeTable, words: Uint32Array): number {
  let lo = 0;
  let hi = table.count - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    if (compareAt(table.starts, mid, words, table.width) <= 0) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found !== -1 && compareAt(table.ends, found, words, table.width) >= 0 ? found : -1;
}

const groups = new Uint16Array(8);

/**
 * Parses the IPv4 (dotted decimal) or IPv6 (hex groups, "::") address in
 * text[from, to) into out at `at` (1 or 4 words). The package's files hold
 * nothing else; false for anything unexpected (the line is skipped). Written
 * over char codes: the 600,000 lines load in a fraction of a second.
 */
function parseInto(text: string, from: number, to: number, v4: boolean, out: Uint32Array, at: number): boolean {
  if (v4) {
    let value = 0;
    let part = 0;
    let dots = 0;
    for (let i = from; i < to; i++) {
      const c = text.charCodeAt(i);
      if (c === 46) {
        value = value * 256 + part;
        part = 0;
        dots++;
      } else if (c >= 48 && c <= 57) {
        part = part * 10 + (c - 48);
        if (part > 255) return false;
      } else return false;
    }
    if (dots !== 3) return false;
    out[at] = value * 256 + part;
    return true;
  }
  let n = 0;
  let gap = -1;
  let group = 0;
  let digits = 0;
  for (let i = from; i <= to; i++) {
    const c = i === to ? 58 : text.charCodeAt(i);
    if (c === 58) {
      if (digits > 0) {
        if (n === 8) return false;
        groups[n++] = group;
      } else if (i === to ? gap !== n || to - from < 2 : i !== from) return false; // empty groups only around "::"
      if (i + 1 < to && text.charCodeAt(i + 1) === 58) {
        if (gap !== -1) return false;
        gap = n;
        i++;
      }
      group = 0;
      digits = 0;
    } else {
      const h = c <= 57 ? c - 48 : (c | 32) - 87;
      if (h < 0 || h > 15 || ++digits > 4) return false;
      group = group * 16 + h;
    }
  }
  if (gap === -1 ? n !== 8 : n > 7) return false;
  const shift = gap === -1 ? 0 : 8 - n;
  for (let w = 0; w < 4; w++) {
    const g = (k: number) => (gap === -1 || k < gap ? groups[k]! : k < gap + shift ? 0 : groups[k - shift]!);
    out[at + w] = ((g(2 * w) << 16) | g(2 * w + 1)) >>> 0;
  }
  return true;
}

/** Reads a start,end,CC CSV of one family into a range table (lines it cannot read are skipped). */
function readRanges(file: string, v4: boolean): RangeTable {
  const text = readFileSync(file, 'latin1');
  let lines = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lines++;
  const width = v4 ? 1 : 4;
  const starts = new Uint32Array((lines + 1) * width);
  const ends = new Uint32Array((lines + 1) * width);
  const codes = new Uint16Array(lines + 1);
  let count = 0;
  for (let start = 0; start < text.length;) {
    let end = text.indexOf('\n', start);
    if (end === -1) end = text.length;
    const a = text.indexOf(',', start);
    const b = a === -1 ? -1 : text.indexOf(',', a + 1);
    // Exactly two letters after the second comma (a CR before the newline allowed).
    if (b !== -1 && b < end && (end - b === 3 || (end - b === 4 && text.charCodeAt(end - 1) === 13))) {
      const c1 = text.charCodeAt(b + 1) & ~32;
      const c2 = text.charCodeAt(b + 2) & ~32;
      if (c1 >= 65 && c1 <= 90 && c2 >= 65 && c2 <= 90
        && parseInto(text, start, a, v4, starts, count * width) && parseInto(text, a + 1, b, v4, ends, count * width)) {
        codes[count++] = (c1 << 8) | c2;
      }
    }
    start = end + 1;
  }
  return { starts, ends, codes, width, count };
}

export class CountryDatabase {
  private readonly v4: RangeTable;
  private readonly v6: RangeTable;

  private constructor(v4: RangeTable, v6: RangeTable) {
    this.v4 = v4;
    this.v6 = v6;
  }

  /** Loads `<prefix>-ipv4.csv` and `<prefix>-ipv6.csv` from a directory (the package's layout). */
  static load(dir: string, prefix = 'geolite2-country'): CountryDatabase {
    return new CountryDatabase(readRanges(join(dir, `${prefix}-ipv4.csv`), true), readRanges(join(dir, `${prefix}-ipv6.csv`), false));
  }

  get ranges(): number {
    return this.v4.count + this.v6.count;
  }

  /** The ISO 3166-1 alpha-2 country of an address, or null when the database has none for it. */
  country(address: ClientAddress | null): string | null {
    if (address === null) return null;
    const table = address.v4 ? this.v4 : this.v6;
    const i = lookup(table, address.words);
    if (i === -1) return null;
    const code = table.codes[i]!;
    return String.fromCharCode(code >>> 8, code & 255);
  }
}

let packaged: CountryDatabase | null = null;

/** The packaged database, loaded on first use and kept for the life of the process. */
export function packagedCountryDatabase(): CountryDatabase {
  if (packaged === null) {
    const dir = dirname(createRequire(import.meta.url).resolve('@ip-location-db/geolite2-country/package.json'));
    packaged = CountryDatabase.load(dir);
  }
  return packaged;
}

/** The endpoint's geo restriction, or null when it is off. The database is asked for only then. */
export function compileGeoRestriction(e: EndpointSnapshot, database: () => CountryDatabase): RequestPolicy | null {
  const geo = e.geo_restriction;
  if (!geo.enabled) return null;
  const db = database();
  const countries = new Set(geo.countries.map((c) => c.toUpperCase()));
  const allowlist = geo.policy === 'allowlist';
  return (ctx) => {
    const country = db.country(ctx.client);
    if (country === null) return null;
    return countries.has(country) === allowlist ? null : forbidden({ policy: 'geo', reason: allowlist ? 'country_not_allowed' : 'country_blocked' });
  };
}
