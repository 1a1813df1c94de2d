// Validation of params, query and body against a route's zod schemas, with
// one `errors[]` entry per failing field (document 1, part 7). Before any
// schema runs, every string of the input (keys included) is checked for
// characters no field takes: NUL and other control characters, and broken
// UTF-16 (lone surrogates). Path and query values are single-line; body
// strings may hold tab, line feed and carriage return. This holds for every
// route at once, so no route can hand PostgreSQL a NUL (which it refuses).
import { z } from 'zod';
import { ApiError, type FieldError } from './errors.ts';

export function issuesToFieldErrors(issues: z.core.$ZodIssue[], prefix?: string): FieldError[] {
  return issues.flatMap((issue) => {
    // An unknown key reports the object's path; name each key as its own field.
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({ field: joinPath(prefix, [...issue.path, key]), message: 'Unknown field' }));
    }
    return [{ field: joinPath(prefix, issue.path), message: issue.message }];
  });
}

function joinPath(prefix: string | undefined, path: PropertyKey[]): string {
  const parts = path.map((p) => (typeof p === 'number' ? `[${p}]` : String(p)));
  const joined = parts.join('.').replace(/\.\[/g, '[');
  return prefix ? (joined ? `${prefix}.${joined}` : prefix) : joined || '(body)';
}

export function parseWith<S extends z.ZodType>(schema: S, value: unknown, prefix?: string): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw new ApiError('VALIDATION_ERROR', undefined, { errors: issuesToFieldErrors(result.error.issues, prefix) });
  return result.data;
}

// C0 controls but tab, LF and CR; DEL; C1 controls.
const CONTROL_MULTILINE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/;
// The same plus tab, LF and CR.
const CONTROL_SINGLE_LINE = /[\u0000-\u001F\u007F-\u009F]/;

/** Why a string may not be accepted as input, or undefined when it may. */
export function unsafeStringReason(value: string, singleLine: boolean): string | undefined {
  if ((singleLine ? CONTROL_SINGLE_LINE : CONTROL_MULTILINE).test(value)) {
    return singleLine ? 'Must not contain control characters (including tab and line breaks)' : 'Must not contain control characters such as NUL';
  }
  if (!value.isWellFormed()) return 'Must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

/** Walks a decoded input (JSON body, query, params) and reports every unsafe string or key. */
export function findUnsafeStrings(value: unknown, singleLine: boolean, path: PropertyKey[] = [], found: FieldError[] = []): FieldError[] {
  if (typeof value === 'string') {
    const reason = unsafeStringReason(value, singleLine);
    if (reason) found.push({ field: joinPath(undefined, path), message: reason });
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) findUnsafeStrings(value[i], singleLine, [...path, i], found);
  } else if (value !== null && typeof value === 'object') {
    for (const [key, member] of Object.entries(value)) {
      const keyReason = unsafeStringReason(key, true);
      // A key that is itself unsafe is named by its JSON form, so the error message stays printable.
      if (keyReason) found.push({ field: joinPath(undefined, [...path, JSON.stringify(key)]), message: `Field name: ${keyReason}` });
      else findUnsafeStrings(member, singleLine, [...path, key], found);
    }
  }
  return found;
}

export interface ValidatedInput {
  params: unknown;
  query: unknown;
  body: unknown;
}

export interface RawInput {
  params: Record<string, string>;
  query: Record<string, string | string[] | undefined>;
  body: unknown;
}

/** Operations that declare no query or body still refuse unknown query fields and a non-empty body. */
const NONE = z.strictObject({});

function hasKeys(value: object): boolean {
  for (const _ in value) return true;
  return false;
}

export function validateRequest(
  raw: RawInput,
  schemas: { params?: z.ZodType; query?: z.ZodType; body?: z.ZodType },
): ValidatedInput {
  // Most requests carry no query, no body or neither: those parts cost nothing.
  const queryGiven = hasKeys(raw.query);
  const errors: FieldError[] = [];
  if (hasKeys(raw.params)) findUnsafeStrings(raw.params, true, [], errors);
  if (queryGiven) findUnsafeStrings(raw.query, true, [], errors);
  if (raw.body !== undefined) findUnsafeStrings(raw.body, false, [], errors);
  if (errors.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors });
  const take = (schema: z.ZodType, value: unknown) => {
    const result = schema.safeParse(value);
    if (result.success) return result.data;
    errors.push(...issuesToFieldErrors(result.error.issues));
    return undefined;
  };
  const params = schemas.params ? take(schemas.params, raw.params) : {};
  const query = schemas.query ? take(schemas.query, raw.query) : queryGiven ? take(NONE, raw.query) : {};
  const body = schemas.body ? take(schemas.body, raw.body ?? {}) : raw.body === undefined ? undefined : (take(NONE, raw.body), undefined);
  if (errors.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors });
  return { params, query, body };
}
