// The JSON body of every route, read as text and parsed here rather than by
// koa-body's JSON mode, so its nesting is bounded before anything walks it: a
// body nested deeper than MAX_JSON_DEPTH is refused with 400 naming the limit,
// decided by one pass over the characters (no recursion, no parse). Bodies
// must be an object or an array (strict JSON, as before), and an object with
// an own `__proto__` key is refused (as @hapi/bourne, which koa-body used,
// refused it). Every later walk of a body (validation's unsafe-string scan,
// the idempotency fingerprint, audit metadata) thus meets at most this depth.
import { ApiError } from './errors.ts';

/** Deepest nesting of objects and arrays a request body may have. */
export const MAX_JSON_DEPTH = 64;

const malformed = (message = 'Malformed JSON') => new ApiError('VALIDATION_ERROR', 'Malformed JSON body', { errors: [{ field: '(body)', message }] });

export const tooDeep = () => new ApiError('VALIDATION_ERROR', `The JSON body is nested deeper than ${MAX_JSON_DEPTH} levels`, {
  errors: [{ field: '(body)', message: `Objects and arrays may be nested at most ${MAX_JSON_DEPTH} levels deep` }],
});

/**
 * Whether a JSON text opens more than `max` objects or arrays inside one
 * another. Brackets inside strings do not count; malformed text is left to
 * the parser. Stops at the first level past `max`.
 */
export function nestedDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  const length = text.length;
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: skip to its closing quote (a backslash escapes the next character).
      for (i++; i < length; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return false;
}

// A key spelled `__proto__` in any escaping (the check @hapi/bourne makes before scanning).
const SUSPECT_PROTO = /"(?:_|\\u005[Ff])(?:_|\\u005[Ff])(?:p|\\u0070)(?:r|\\u0072)(?:o|\\u006[Ff])(?:t|\\u0074)(?:o|\\u006[Ff])(?:_|\\u005[Ff])(?:_|\\u005[Ff])"\s*:/;

/** Whether any object in a parsed value has an own `__proto__` key (walked with a stack, not recursion). */
function hasProtoKey(root: unknown): boolean {
  const stack: unknown[] = [root];
  while (stack.length) {
    const value = stack.pop();
    if (value === null || typeof value !== 'object') continue;
    if (!Array.isArray(value) && Object.hasOwn(value, '__proto__')) return true;
    for (const member of Object.values(value)) if (member !== null && typeof member === 'object') stack.push(member);
  }
  return false;
}

const OBJECT_OR_ARRAY = /^[\x20\x09\x0a\x0d]*[[{]/;

/** Parses a request body's text: an object or array at most MAX_JSON_DEPTH deep; 400 otherwise. */
export function parseJsonBody(text: string): unknown {
  if (text === '') return {};
  if (!OBJECT_OR_ARRAY.test(text)) throw malformed('Must be a JSON object or array');
  if (nestedDeeperThan(text, MAX_JSON_DEPTH)) throw tooDeep();
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw malformed();
  }
  if (SUSPECT_PROTO.test(text) && hasProtoKey(value)) throw malformed('A field named __proto__ is not accepted');
  return value;
}
