// The body parser's nesting bound and the iterative unsafe-string scan
// (regression: a body 20,000 levels deep overflowed the recursive scan's
// stack and answered 500 before authentication).
import t from 'tap';
import { ApiError, MAX_FIELD_ERRORS } from './errors.ts';
import { MAX_JSON_DEPTH, nestedDeeperThan, parseJsonBody } from './json-body.ts';
import { findUnsafeStrings } from './validation.ts';

const objects = (levels: number) => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels);
const arrays = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);

function refusal(text: string): ApiError {
  try {
    parseJsonBody(text);
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  throw new Error('accepted');
}

t.test('nesting up to the limit is parsed; one level more is a 400 naming the limit', async (t) => {
  t.ok(Array.isArray(parseJsonBody(arrays(MAX_JSON_DEPTH))));
  t.type(parseJsonBody(objects(MAX_JSON_DEPTH)), 'object');
  for (const text of [arrays(MAX_JSON_DEPTH + 1), objects(MAX_JSON_DEPTH + 1), arrays(100_000), objects(100_000), `[${'{"a":['.repeat(40)}`]) {
    const error = refusal(text);
    t.equal(error.status, 400);
    t.match(error.message, `nested deeper than ${MAX_JSON_DEPTH} levels`);
    t.same(error.errors, [{ field: '(body)', message: `Objects and arrays may be nested at most ${MAX_JSON_DEPTH} levels deep` }]);
  }
});

t.test('brackets inside strings (escaped quotes included) are not nesting', async (t) => {
  const text = JSON.stringify({ a: '['.repeat(500), b: `"{{{${'\\'.repeat(3)}"[[[`, c: [[['x']]] });
  t.equal(nestedDeeperThan(text, 4), false, 'the object and the three arrays in it');
  t.equal(nestedDeeperThan(text, 3), true, 'the arrays still count');
  t.same(parseJsonBody(text), JSON.parse(text));
});

t.test('only objects and arrays are bodies; malformed text and __proto__ keys are 400 on (body)', async (t) => {
  t.same(parseJsonBody(''), {});
  for (const [text, message] of [
    ['"text"', 'Must be a JSON object or array'],
    ['null', 'Must be a JSON object or array'],
    ['  1', 'Must be a JSON object or array'],
    ['{"a":', 'Malformed JSON'],
    ['{"a": 1}}', 'Malformed JSON'],
    ['{"__proto__": {"admin": true}}', 'A field named __proto__ is not accepted'],
    ['{"x": [{"\\u005f_proto__": 1}]}', 'A field named __proto__ is not accepted'],
  ] as const) {
    const error = refusal(text);
    t.equal(error.code, 'VALIDATION_ERROR', text);
    t.same(error.errors, [{ field: '(body)', message }], text);
  }
  t.same(parseJsonBody('{"proto": "__proto__"}'), { proto: '__proto__' }, 'the word as a value is fine');
});

t.test('the unsafe-string scan walks any depth without recursion, reporting in document order', async (t) => {
  // Built in code, past any body's limit: a million levels would overflow a recursive walk many times over.
  let deep: unknown = 'bottom\u0000';
  for (let i = 0; i < 1_000_000; i++) deep = [deep];
  const found = findUnsafeStrings(deep, false);
  t.equal(found.size, 1);
  t.match(found.entries[0]!.field, /^\[0\]\[0\]/);

  const scanned = findUnsafeStrings({ a: 'ok', 'b\u0000': 1, c: ['x', 'y\u0001', { d: '\u0000', e: 'line\nbreak' }] }, false);
  t.same(scanned.entries.map((e) => e.field), ['"b\\u0000"', 'c[1]', 'c[2].d']);
  t.same(findUnsafeStrings({ q: 'line\nbreak' }, true).entries.map((e) => e.field), ['q'], 'single-line inputs refuse line breaks');
});

t.test('past MAX_FIELD_ERRORS the scan only counts', async (t) => {
  const found = findUnsafeStrings({ x: Array.from({ length: 1_000 }, () => '\u0000') }, false);
  t.equal(found.entries.length, MAX_FIELD_ERRORS);
  t.equal(found.omitted, 1_000 - MAX_FIELD_ERRORS);
  const error = found.toError();
  t.equal(error.errors!.length, MAX_FIELD_ERRORS);
  t.equal(error.errorsOmitted, 1_000 - MAX_FIELD_ERRORS);
  const direct = new ApiError('VALIDATION_ERROR', undefined, { errors: Array.from({ length: 75 }, (_, i) => ({ field: `f${i}`, message: 'x' })) });
  t.equal(direct.errors!.length, MAX_FIELD_ERRORS, 'any ApiError keeps at most the cap');
  t.equal(direct.errorsOmitted, 25);
});
