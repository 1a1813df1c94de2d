// The error body and status mapping of DESIGN.md §4. Handlers and services
// raise ApiError (usually through assertThat or a named helper); the error
// middleware turns it into `{code, message, request_id, errors?}`.

export interface FieldError {
  field: string;
  message: string;
}

export const errorStatus = {
  VALIDATION_ERROR: 400,
  UNAUTHORIZED: 401,
  MFA_REQUIRED: 401,
  PAYMENT_FAILED: 402,
  FORBIDDEN: 403,
  ACCOUNT_SUSPENDED: 403,
  EMAIL_NOT_VERIFIED: 403,
  ACCOUNT_PENDING_DELETION: 403,
  STEP_UP_REQUIRED: 403,
  PROFILE_TOKEN_REQUIRED: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  PRIMARY_PROFILE: 409,
  DEFAULT_PAYMENT_METHOD_IN_USE: 409,
  PLAN_TYPE_MISMATCH: 409,
  PLAN_HAS_SUBSCRIBERS: 409,
  PROFILE_LIMIT_REACHED: 409,
  LOG_DRAIN_LIMIT_REACHED: 409,
  SUBSCRIPTION_EXISTS: 409,
  ACCOUNT_SCHEDULED_FOR_DELETION: 409,
  RESOURCE_IN_USE: 409,
  IDEMPOTENCY_KEY_IN_USE: 409,
  PRECONDITION_FAILED: 412,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  INVALID_CONFIGURATION: 422,
  IDEMPOTENCY_KEY_REUSED: 422,
  UNPROCESSABLE: 422,
  RATE_LIMITED: 429,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof errorStatus;

const defaultMessages: Partial<Record<ErrorCode, string>> = {
  VALIDATION_ERROR: 'One or more fields failed validation',
  UNAUTHORIZED: 'Access token missing or invalid',
  FORBIDDEN: 'You do not have permission to perform this action',
  NOT_FOUND: 'Resource not found',
  CONFLICT: 'The request conflicts with the current state of the resource',
  PRECONDITION_FAILED: 'The resource has changed since it was read (If-Match does not match)',
  RATE_LIMITED: 'Too many requests; retry after the indicated period',
  INTERNAL_ERROR: 'An unexpected error occurred',
  SERVICE_UNAVAILABLE: 'A dependency is unavailable; retry later',
};

/**
 * The most `errors` entries an error body carries; entries beyond it are left
 * out and counted in `errors_omitted`, so no input can make the answer grow
 * with it (100,000 bad strings gave an 8 MB 400).
 */
export const MAX_FIELD_ERRORS = 50;

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** At most MAX_FIELD_ERRORS entries. */
  readonly errors?: FieldError[];
  /** How many field errors were left out of `errors` (0 when none were). */
  readonly errorsOmitted: number;
  /** Extra response headers, e.g. Retry-After. */
  readonly headers?: Record<string, string>;
  /** Extra members of the error body (e.g. validation_errors of a failed publish). */
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message?: string, options: { errors?: FieldError[]; errorsOmitted?: number; headers?: Record<string, string>; details?: Record<string, unknown> } = {}) {
    super(message ?? defaultMessages[code] ?? code);
    this.code = code;
    this.status = errorStatus[code];
    const errors = options.errors;
    this.errors = errors && errors.length > MAX_FIELD_ERRORS ? errors.slice(0, MAX_FIELD_ERRORS) : errors;
    this.errorsOmitted = (options.errorsOmitted ?? 0) + (errors ? errors.length - this.errors!.length : 0);
    this.headers = options.headers;
    this.details = options.details;
  }
}

/** Throws `error` unless `condition` holds; narrows like an assertion. */
export function assertThat(condition: unknown, error: ApiError | (() => ApiError)): asserts condition {
  if (!condition) throw typeof error === 'function' ? error() : error;
}

export const notFound = (what = 'Resource') => new ApiError('NOT_FOUND', `${what} not found`);
export const forbidden = (message?: string) => new ApiError('FORBIDDEN', message);
export const unauthorized = (message?: string) => new ApiError('UNAUTHORIZED', message);
export const conflict = (message?: string) => new ApiError('CONFLICT', message);
export const validationError = (errors: FieldError[], message?: string) => new ApiError('VALIDATION_ERROR', message, { errors });

/** Returns the found record or throws 404. */
/**
 * The calling user's id: 401 without a caller, 403 with `message` for a caller
 * that is not a user account (a machine API token).
 */
export function callerUserId(rc: { actor: { type: string; id: string } | null }, message: string): string {
  const actor = rc.actor;
  if (!actor) throw new ApiError('UNAUTHORIZED');
  if (actor.type !== 'user') throw new ApiError('FORBIDDEN', message);
  return actor.id;
}

export function found<T>(record: T | null | undefined, what = 'Resource'): T {
  if (record === null || record === undefined) throw notFound(what);
  return record;
}

/** A reply that its route's declaration does not allow (a bug of ours, never the caller's). */
export class ContractViolation extends Error {
  constructor(route: { method: string; path: string }, detail: string) {
    super(`${route.method.toUpperCase()} ${route.path}: ${detail}`);
    this.name = 'ContractViolation';
  }
}
