// The Prefetch job record and body (document 3 §2 "Prefetch job", §4.1).
import { z } from 'zod';
import { timestamp, timestampOrNull } from '../http/schemas.ts';
import { idOf } from './fields.ts';
import { PREFETCH_PRIORITIES, WORK_STATUSES, type PrefetchJob } from './purge-entity.ts';

export const MAX_PREFETCH_URLS = 500;

export const prefetchRecord = z.object({
  id: z.uuid(),
  endpoint_id: z.uuid(),
  status: z.enum(WORK_STATUSES),
  priority: z.enum(PREFETCH_PRIORITIES),
  total: z.number().int(),
  fetched: z.number().int(),
  failed: z.number().int(),
  failed_urls: z.array(z.object({ url: z.string(), reason: z.string() })),
  created_at: timestamp(),
  completed_at: timestampOrNull(),
});
export const presentPrefetch = (j: PrefetchJob) => ({ ...j, endpoint_id: idOf(j.endpoint)! });

/** An absolute http(s) URL without credentials or fragment; its host is checked against the endpoint by the service. */
const prefetchUrl = () => z.string().max(2048).superRefine((value, ctx) => {
  const url = URL.parse(value);
  const problem = !url ? 'Must be an absolute URL such as https://cdn.example.com/videos/a.mp4'
    : url.protocol !== 'http:' && url.protocol !== 'https:' ? 'Must be an http or https URL'
      : url.username || url.password ? 'Must not carry credentials'
        : value.includes('#') ? 'Must not carry a fragment'
          : null;
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

export const prefetchBody = z.strictObject({
  urls: z.array(prefetchUrl()).min(1).max(MAX_PREFETCH_URLS)
    .describe(`1..${MAX_PREFETCH_URLS} absolute http(s) URLs whose host is the endpoint's CDN hostname or one of its custom domains`),
  priority: z.enum(PREFETCH_PRIORITIES).default('normal'),
});
export type PrefetchInput = z.output<typeof prefetchBody>;
