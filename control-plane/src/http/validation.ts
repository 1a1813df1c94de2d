// Validation of params, query and body against a route's zod schemas, with
// one `errors[]` entry per failing field (document 1, part 7).
import type { Context } from 'koa';
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

export interface ValidatedInput {
  params: unknown;
  query: unknown;
  body: unknown;
}

export function validateRequest(
  ctx: Context,
  schemas: { params?: z.ZodType; query?: z.ZodType; body?: z.ZodType },
): ValidatedInput {
  const errors: FieldError[] = [];
  const take = (schema: z.ZodType | undefined, value: () => unknown, fallback: unknown) => {
    if (!schema) return fallback;
    const result = schema.safeParse(value());
    if (result.success) return result.data;
    errors.push(...issuesToFieldErrors(result.error.issues));
    return undefined;
  };
  const params = take(schemas.params, () => ctx.params ?? {}, {});
  const query = take(schemas.query, () => ({ ...ctx.query }), {});
  const body = take(schemas.body, () => (ctx.request as { body?: unknown }).body ?? {}, undefined);
  if (errors.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors });
  return { params, query, body };
}
