// A strict parser of RFC 8941 Structured Field Dictionaries (§4.2.2), for the
// targeted cache-control fields (CDN-Cache-Control, RFC 9213 §2). Written here
// rather than taken from npm: the maintained package (structured-headers)
// returns one JavaScript number for Integers and Decimals, so `max-age=60.0`
// would pass as the Integer 60, which RFC 9213 §2.1 says not to consume.
// Parameters are parsed (a malformed one fails the whole field) and dropped:
// RFC 9213 §2.1 ignores parameters on directives.

export type BareItem =
  | { type: 'integer'; value: number }
  | { type: 'decimal'; value: number }
  | { type: 'string'; value: string }
  | { type: 'token'; value: string }
  | { type: 'bytes'; value: string }
  | { type: 'boolean'; value: boolean };

/** A dictionary member: an Item, or an Inner List of Items (parameters dropped). */
export type Member = BareItem | { type: 'inner-list'; items: BareItem[] };

class Invalid extends Error {}

const isDigit = (c: number) => c >= 48 && c <= 57;
const isLcAlpha = (c: number) => c >= 97 && c <= 122;
const isAlpha = (c: number) => isLcAlpha(c) || (c >= 65 && c <= 90);
// tchar of RFC 9110 §5.6.2
const TCHAR = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]$/;
const BASE64 = /^[A-Za-z0-9+/=]$/;

class Parser {
  private readonly s: string;
  private i = 0;

  constructor(s: string) {
    this.s = s;
  }

  private peek(): number {
    return this.i < this.s.length ? this.s.charCodeAt(this.i) : -1;
  }

  private fail(): never {
    throw new Invalid();
  }

  dictionary(): Map<string, Member> {
    const out = new Map<string, Member>();
    this.skipSp();
    while (this.i < this.s.length) {
      const key = this.key();
      let member: Member;
      if (this.peek() === 61 /* = */) {
        this.i++;
        member = this.itemOrInnerList();
      } else {
        member = { type: 'boolean', value: true };
        this.parameters();
      }
      out.set(key, member); // a repeated key: the last one wins (§4.2.2)
      this.skipOws();
      if (this.i >= this.s.length) return out;
      if (this.peek() !== 44 /* , */) this.fail();
      this.i++;
      this.skipOws();
      if (this.i >= this.s.length) this.fail(); // a trailing comma
    }
    return out;
  }

  private skipSp(): void {
    while (this.peek() === 32) this.i++;
  }

  private skipOws(): void {
    for (let c = this.peek(); c === 32 || c === 9; c = this.peek()) this.i++;
  }

  private key(): string {
    const start = this.i;
    const c = this.peek();
    if (!isLcAlpha(c) && c !== 42 /* * */) this.fail();
    this.i++;
    for (let d = this.peek(); isLcAlpha(d) || isDigit(d) || d === 95 || d === 45 || d === 46 || d === 42; d = this.peek()) this.i++;
    return this.s.slice(start, this.i);
  }

  private itemOrInnerList(): Member {
    if (this.peek() === 40 /* ( */) return this.innerList();
    const item = this.bareItem();
    this.parameters();
    return item;
  }

  private innerList(): Member {
    this.i++;
    const items: BareItem[] = [];
    for (;;) {
      this.skipSp();
      if (this.peek() === 41 /* ) */) {
        this.i++;
        this.parameters();
        return { type: 'inner-list', items };
      }
      items.push(this.bareItem());
      this.parameters();
      const c = this.peek();
      if (c !== 32 && c !== 41) this.fail();
    }
  }

  private parameters(): void {
    while (this.peek() === 59 /* ; */) {
      this.i++;
      this.skipSp();
      this.key();
      if (this.peek() === 61) {
        this.i++;
        this.bareItem();
      }
    }
  }

  private bareItem(): BareItem {
    const c = this.peek();
    if (c === 45 || isDigit(c)) return this.number();
    if (c === 34) return this.string();
    if (c === 58) return this.bytes();
    if (c === 63) return this.boolean();
    if (isAlpha(c) || c === 42) return this.token();
    return this.fail();
  }

  private number(): BareItem {
    const start = this.i;
    if (this.peek() === 45) this.i++;
    if (!isDigit(this.peek())) this.fail();
    let dot = -1;
    for (let c = this.peek(); isDigit(c) || (c === 46 && dot === -1); c = this.peek()) {
      if (c === 46) {
        if (this.i - start > 12 + (this.s.charCodeAt(start) === 45 ? 1 : 0)) this.fail();
        dot = this.i;
      }
      this.i++;
    }
    const text = this.s.slice(start, this.i);
    const digits = text.replace(/^-/, '');
    if (dot === -1) {
      if (digits.length > 15) this.fail();
      return { type: 'integer', value: Number(text) };
    }
    const fraction = this.i - dot - 1;
    if (fraction < 1 || fraction > 3 || digits.length > 16) this.fail();
    return { type: 'decimal', value: Number(text) };
  }

  private string(): BareItem {
    this.i++;
    let out = '';
    for (;;) {
      const c = this.peek();
      if (c === -1) this.fail();
      this.i++;
      if (c === 92 /* \ */) {
        const next = this.peek();
        if (next !== 34 && next !== 92) this.fail();
        out += this.s[this.i++];
      } else if (c === 34) return { type: 'string', value: out };
      else if (c < 0x20 || c > 0x7e) this.fail();
      else out += this.s[this.i - 1];
    }
  }

  private token(): BareItem {
    const start = this.i;
    this.i++;
    for (;;) {
      const ch = this.s[this.i];
      if (ch === undefined || !(TCHAR.test(ch) || ch === ':' || ch === '/')) break;
      this.i++;
    }
    return { type: 'token', value: this.s.slice(start, this.i) };
  }

  private bytes(): BareItem {
    this.i++;
    const start = this.i;
    for (;;) {
      const ch = this.s[this.i];
      if (ch === undefined) this.fail();
      if (ch === ':') break;
      if (!BASE64.test(ch)) this.fail();
      this.i++;
    }
    const value = this.s.slice(start, this.i);
    this.i++;
    return { type: 'bytes', value };
  }

  private boolean(): BareItem {
    this.i++;
    const c = this.peek();
    if (c !== 48 && c !== 49) this.fail();
    this.i++;
    return { type: 'boolean', value: c === 49 };
  }
}

/**
 * Parses a field value as a Structured Field Dictionary (several field lines
 * combined with ", " first). null when it does not parse: the caller ignores
 * the whole field.
 */
export function parseDictionary(value: string): Map<string, Member> | null {
  try {
    const p = new Parser(value);
    return p.dictionary();
  } catch (err) {
    if (err instanceof Invalid) return null;
    throw err;
  }
}
