// How stored-data failures map to API errors.
import t from 'tap';
import { OptimisticLockError } from '@mikro-orm/core';
import { fromKnownError } from './error-handler.ts';

t.test('regression: a stale version is 412 only for a request that sent If-Match; otherwise a 409 to retry', async (t) => {
  const stale = new OptimisticLockError('The optimistic lock failed');
  const route = { ifMatch: async () => ({ id: 'x', version: 1 }) };
  t.equal(fromKnownError(stale, route, true)?.code, 'PRECONDITION_FAILED', 'the client\'s own precondition failed');
  t.equal(fromKnownError(stale, route, false)?.code, 'CONFLICT', 'no If-Match sent (a PATCH racing the edge activating the endpoint): not a failed precondition');
  t.equal(fromKnownError(stale, {}, true)?.code, 'CONFLICT', 'a route that takes no If-Match never answers 412');
});

t.test('Redis down or not answering is 503 SERVICE_UNAVAILABLE', async (t) => {
  t.equal(fromKnownError(new Error('Connection is closed.'))?.code, 'SERVICE_UNAVAILABLE');
  t.equal(fromKnownError(new Error('Command timed out'))?.code, 'SERVICE_UNAVAILABLE', 'the store\'s command timeout');
  t.equal(fromKnownError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))?.code, 'SERVICE_UNAVAILABLE');
  t.equal(fromKnownError(new Error('something else')), undefined, 'not every error is Redis');
});
