// How stored-data failures map to API errors.
import t from 'tap';
import { OptimisticLockError } from '@mikro-orm/core';
import { fromKnownError } from './error-handler.ts';

t.test('regression: a stale version is 412 only for a request that sent If-Match to a route that takes it; otherwise a 409 to retry', async (t) => {
  // `preconditioned` is the router's decision (RequestState): If-Match sent, and the route declares ifMatch.
  const stale = new OptimisticLockError('The optimistic lock failed');
  t.equal(fromKnownError(stale, true)?.code, 'PRECONDITION_FAILED', 'the client\'s own precondition failed');
  t.equal(fromKnownError(stale, false)?.code, 'CONFLICT', 'no If-Match sent (a PATCH racing the edge activating the endpoint), or a route that takes none: not a failed precondition');
  t.equal(fromKnownError(stale)?.code, 'CONFLICT', 'outside a route (nothing decided): a conflict');
});

t.test('Redis down or not answering is 503 SERVICE_UNAVAILABLE', async (t) => {
  t.equal(fromKnownError(new Error('Connection is closed.'))?.code, 'SERVICE_UNAVAILABLE');
  t.equal(fromKnownError(new Error('Command timed out'))?.code, 'SERVICE_UNAVAILABLE', 'the store\'s command timeout');
  t.equal(fromKnownError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))?.code, 'SERVICE_UNAVAILABLE');
  t.equal(fromKnownError(new Error('something else')), undefined, 'not every error is Redis');
});
