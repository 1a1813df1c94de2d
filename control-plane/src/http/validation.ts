// Validation of params, query and body against a route's zod schemas, with
// one `errors[]` entry per failing field (document 1, part 7). Before any
// schema runs, every string of the input (keys included) is checked for
// characters no field takes: NUL and other control characters, and broken
// UTF-16 (lone surrogates). Path and query values are single-line; body
// strings may hold tab, line feed and carriage return. This holds for every
// route at once, so no route can hand PostgreSQL a NUL (which it refuses).
import { z } from 'zod';
import { ApiError, MAX_FIELD_ERRORS, type FieldError } from './errors.ts';

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

/** A value still to visit, with how it was reached (the path is only spelled out for a value that fails). */
interface Visit {
  value: unknown;
  key: PropertyKey | undefined;
  parent: Visit | undefined;
  /** Set for a key that is itself unsafe: reported in its place, its value not looked at. */
  keyReason?: string;
}

function pathOf(visit: Visit): PropertyKey[] {
  const path: PropertyKey[] = [];
  for (let at: Visit | undefined = visit; at?.parent; at = at.parent) path.push(at.key!);
  return path.reverse();
}

/**
 * Field errors as validation collects them: the first MAX_FIELD_ERRORS
 * spelled out, the rest only counted (their paths are never built), so a body
 * of 100,000 bad strings costs a count, not 100,000 messages.
 */
export class FieldErrorList {
  readonly entries: FieldError[] = [];
  omitted = 0;

  get size(): number {
    return this.entries.length + this.omitted;
  }

  add(entry: () => FieldError): void {
    if (this.entries.length < MAX_FIELD_ERRORS) this.entries.push(entry());
    else this.omitted++;
  }

  toError(): ApiError {
    return new ApiError('VALIDATION_ERROR', undefined, { errors: this.entries, errorsOmitted: this.omitted });
  }
}

/**
 * Walks a decoded input (JSON body, query, params) and reports every unsafe
 * string or key, in document order. Iterative (a stack, no recursion), so no
 * nesting can overflow the call stack; bodies are bounded at MAX_JSON_DEPTH
 * anyway (json-body.ts).
 */
export function findUnsafeStrings(value: unknown, singleLine: boolean, found = new FieldErrorList()): FieldErrorList {
  const stack: Visit[] = [{ value, key: undefined, parent: undefined }];
  while (stack.length) {
    const visit = stack.pop()!;
    const current = visit.value;
    if (visit.keyReason) {
      const reason = visit.keyReason;
      found.add(() => ({ field: joinPath(undefined, pathOf(visit)), message: `Field name: ${reason}` }));
    } else if (typeof current === 'string') {
      const reason = unsafeStringReason(current, singleLine);
      if (reason) found.add(() => ({ field: joinPath(undefined, pathOf(visit)), message: reason }));
    } else if (Array.isArray(current)) {
      // Pushed last first, so members are reported in order.
      for (let i = current.length - 1; i >= 0; i--) stack.push({ value: current[i], key: i, parent: visit });
    } else if (current !== null && typeof current === 'object') {
      const entries = Object.entries(current);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, member] = entries[i]!;
        // A key that is itself unsafe is named by its JSON form, so the error message stays printable.
        const keyReason = unsafeStringReason(key, true);
        stack.push(keyReason ? { value: undefined, key: JSON.stringify(key), parent: visit, keyReason } : { value: member, key, parent: visit });
      }
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
  const errors = new FieldErrorList();
  if (hasKeys(raw.params)) findUnsafeStrings(raw.params, true, errors);
  if (queryGiven) findUnsafeStrings(raw.query, true, errors);
  if (raw.body !== undefined) findUnsafeStrings(raw.body, false, errors);
  if (errors.size) throw errors.toError();
  const take = (schema: z.ZodType, value: unknown) => {
    const result = schema.safeParse(value);
    if (result.success) return result.data;
    for (const entry of issuesToFieldErrors(result.error.issues)) errors.add(() => entry);
    return undefined;
  };
  const params = schemas.params ? take(schemas.params, raw.params) : {};
  const query = schemas.query ? take(schemas.query, raw.query) : queryGiven ? take(NONE, raw.query) : {};
  const body = schemas.body ? take(schemas.body, raw.body ?? {}) : raw.body === undefined ? undefined : (take(NONE, raw.body), undefined);
  if (errors.size) throw errors.toError();
  return { params, query, body };
}
