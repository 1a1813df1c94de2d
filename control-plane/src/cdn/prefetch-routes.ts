// Prefetch (document 3 §4.1; DESIGN.md §6): submit for an endpoint and read a
// job of that endpoint. Operators may prefetch (cdn.prefetch).
import { z } from 'zod';
import { bare, reply } from '../http/route.ts';
import { uuid } from '../http/schemas.ts';
import { idParams } from './fields.ts';
import { prefetchBody, prefetchRecord, presentPrefetch } from './prefetch-record.ts';
import { findPrefetch, submitPrefetch } from './prefetch-service.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

const tags = ['CDN: prefetch'];
export const PREFETCHES_PER_MINUTE = 120;

const submit = defineRoute({
  method: 'post', path: '/v1/cdn/endpoints/:id/prefetch', tags, access: { permission: 'cdn.prefetch' }, idempotent: true,
  rateLimits: [{ name: 'cdn-prefetch', limit: PREFETCHES_PER_MINUTE, windowSeconds: 60, by: 'caller' }],
  summary: 'Prefetch URLs into the edge caches',
  description: 'urls: 1..500 absolute http(s) URLs whose host is the endpoint\'s CDN hostname or one of its custom domains (otherwise 400 naming `urls[i]`, '
    + 'nothing stored); priority low, normal (default) or high. Answers 202 with the job `pending` (total = the number of URLs); the edge nodes fetch them '
    + `from the origin. At most ${PREFETCHES_PER_MINUTE} submissions per caller and minute. Audit-logged.`,
  params: idParams, body: prefetchBody,
  responses: { 202: bare(prefetchRecord) },
  async handler({ params, body, rc, app }) {
    const job = await submitPrefetch(app, rc, params.id, body);
    return reply.accepted(presentPrefetch(job), { location: `/v1/cdn/endpoints/${params.id}/prefetch/${job.id}` });
  },
});

const read = defineRoute({
  method: 'get', path: '/v1/cdn/endpoints/:id/prefetch/:job_id', tags, access: { permission: 'cdn.read' },
  summary: 'Read a prefetch job', description: 'A job of another endpoint is not found here.',
  params: z.strictObject({ id: uuid(), job_id: uuid() }),
  responses: { 200: bare(prefetchRecord) },
  async handler({ params, rc }) {
    return presentPrefetch(await findPrefetch(rc, params.id, params.job_id));
  },
});

export const prefetchRoutes = [submit, read];
