// Maps every failure to the error body of document 1 part 7 and never leaks
// internals: unknown errors become 500 INTERNAL_ERROR, logged with the request id.
import type { Context } from 'koa';
import { NotFoundError, OptimisticLockError, UniqueConstraintViolationException, ConnectionException } from '@mikro-orm/core';
import { ApiError, ContractViolation } from './errors.ts';
import type { RequestState } from './request-state.ts';
import { undeclaredError } from './route.ts';

export function fromKnownError(error: unknown, preconditioned = false): ApiError | undefined {
  if (error instanceof ApiError) return error;
  // A stale version: the client's If-Match when it sent one to a route that takes it (`preconditioned`,
  // RequestState); otherwise another writer (a request, or the platform itself: the edge activating an
  // endpoint) changed the record while this request ran — a conflict to retry, never a failed precondition
  // the client did not set.
  if (error instanceof OptimisticLockError) {
    return preconditioned ? new ApiError('PRECONDITION_FAILED') : new ApiError('CONFLICT', 'The record kept changing while this request ran; retry');
  }
  if (error instanceof NotFoundError) return new ApiError('NOT_FOUND');
  if (error instanceof UniqueConstraintViolationException) return new ApiError('CONFLICT', 'A resource with these values already exists');
  if (error instanceof ConnectionException || databaseConnectionLost(error)) return new ApiError('SERVICE_UNAVAILABLE', 'The database is unavailable; retry later');
  const e = error as { status?: number; statusCode?: number; httpCode?: number; code?: string | number; name?: string; message?: string };
  // ioredis when Redis is down, or stopped answering (the store's command timeout)
  if (e?.name === 'MaxRetriesPerRequestError' || e?.code === 'ECONNREFUSED' || e?.message === 'Connection is closed.' || e?.message === 'Command timed out') {
    return new ApiError('SERVICE_UNAVAILABLE');
  }
  // koa-body / co-body / formidable errors carry an HTTP status
  const status = e?.status ?? e?.statusCode ?? e?.httpCode;
  if (status === 413) return new ApiError('PAYLOAD_TOO_LARGE', 'Request body is too large');
  if (status === 415) return new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Unsupported request body type');
  if (status === 400 && (e?.name === 'SyntaxError' || /JSON|invalid/i.test(String(e?.message)))) {
    return new ApiError('VALIDATION_ERROR', 'Malformed JSON body', { errors: [{ field: '(body)', message: 'Malformed JSON' }] });
  }
  if (status === 400 && e?.name === 'BadRequestError') return new ApiError('VALIDATION_ERROR', 'Malformed request body', { errors: [{ field: '(body)', message: String(e.message) }] });
  return undefined;
}

/**
 * A query the database could not finish because the connection went away under it: the server ended it (SQLSTATE
 * class 08 connection exception; 57P01–57P03 administrator command, crash shutdown, cannot connect now: a restart
 * or a failover), or the socket broke mid-query (pg's "Connection terminated", a reset or a broken pipe). The same
 * outage as a refused connection, so the same 503.
 */
function databaseConnectionLost(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true;
  if (code === 'ECONNRESET' || code === 'EPIPE') return true;
  return typeof e?.message === 'string' && /^Connection terminated( unexpectedly| due to connection timeout)?$/.test(e.message.split('\n')[0]!);
}

export function errorBody(error: ApiError, requestId: string): Record<string, unknown> {
  return {
    code: error.code,
    message: error.message,
    request_id: requestId,
    ...(error.errors ? { errors: error.errors } : {}),
    ...(error.errorsOmitted > 0 ? { errors_omitted: error.errorsOmitted } : {}),
    ...error.details,
  };
}

/**
 * Writes the error response for any failure (logged when it is ours to fix).
 * With `checkContract` (development and tests), a reply the route does not
 * declare, or an error code it does not declare, becomes a 500 that names
 * the route and the difference, so the suite fails on it.
 */
export function respondWithError(ctx: Context, error: unknown, checkContract: boolean): void {
  const state = ctx.state as RequestState;
  let apiError = fromKnownError(error, state.preconditioned);
  if (apiError && checkContract && undeclaredError(state.route, apiError.code)) {
    error = new ContractViolation(state.route!, `answered error ${apiError.code}, which it does not declare`);
    apiError = undefined;
  }
  if (!apiError) {
    state.log.error({ err: error }, error instanceof ContractViolation ? 'reply contract violated' : 'unhandled error');
    apiError = new ApiError('INTERNAL_ERROR', checkContract && error instanceof ContractViolation ? `Reply contract violated: ${error.message}` : undefined);
  } else if (apiError.status >= 500) {
    state.log.warn({ err: error }, 'dependency failure');
  }
  ctx.status = apiError.status;
  if (apiError.headers) ctx.set(apiError.headers);
  ctx.body = errorBody(apiError, state.requestId);
}
