// A small, seedable generator for property and fuzz tests (mulberry32): the
// same seed gives the same sequence, so a failing run can be run again.

export interface SeededRandom {
  chance(p: number): boolean;
  /** An integer in [min, max]. */
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
  /** n characters of [a-z0-9_-]. */
  text(n: number): string;
}

export function seededRandom(seed: number): SeededRandom {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789-_';
  return {
    chance: (p) => next() < p,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => items[Math.floor(next() * items.length)]!,
    text: (n) => Array.from({ length: n }, () => ALPHABET[Math.floor(next() * ALPHABET.length)]).join(''),
  };
}
