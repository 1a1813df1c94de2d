// Prefetch jobs (document 3 §4.1). A job is stored `pending` with total =
// the number of URLs; the control channel hands it to the edge nodes, which
// fetch each URL through their own listener (edge-agent prefetch). Every URL's
// host must be the endpoint's CDN hostname or one of its custom domains (a
// wildcard domain covers one more label); others are refused with 400 naming
// `urls[i]`, nothing stored. A stored job is announced
// (PREFETCH_SUBMITTED_CHANNEL) for the control channel to hand out.
import { compileHostPatterns } from '../../../shared/src/match/host.ts';
import { recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { CoreServices } from '../core/services.ts';
import { found, validationError } from '../http/errors.ts';
import { announce, PREFETCH_SUBMITTED_CHANNEL } from './announcements.ts';
import { Endpoint } from './cdn.entities.ts';
import { CustomDomain } from './domain-entity.ts';
import { findEndpoint } from './endpoint-service.ts';
import type { PrefetchInput } from './prefetch-record.ts';
import { PrefetchJob } from './purge-entity.ts';

/** Every hostname the endpoint answers: its CDN hostname and its custom domains. */
export async function endpointHostnames(rc: RequestContext, endpoint: Endpoint): Promise<string[]> {
  const domains = await rc.em.find(CustomDomain, { endpoint: endpoint.id }, { fields: ['hostname'] });
  return [endpoint.hostname, ...domains.map((d) => d.hostname)];
}

export async function submitPrefetch(services: Pick<CoreServices, 'store'>, rc: RequestContext, endpointId: string, input: PrefetchInput): Promise<PrefetchJob> {
  const endpoint = await findEndpoint(rc, endpointId);
  const hostnames = await endpointHostnames(rc, endpoint);
  const served = compileHostPatterns(hostnames);
  const problems = input.urls.flatMap((url, i) => {
    const host = new URL(url).hostname;
    return served(host) ? [] : [{ field: `urls[${i}]`, message: `Host ${host} is neither the endpoint's hostname (${endpoint.hostname}) nor one of its custom domains` }];
  });
  if (problems.length) throw validationError(problems);
  const job = rc.em.create(PrefetchJob, {
    endpoint, urls: input.urls, priority: input.priority, status: 'pending', total: input.urls.length, fetched: 0, failed: 0, failed_urls: [],
    submitted_by: rc.actor?.id ?? null, completed_at: null,
  } as never);
  recordAudit(rc, { action: 'prefetch.submitted', resource_type: 'prefetch_job', resource_id: job.id, metadata: { endpoint_id: endpoint.id, urls: job.total, priority: job.priority } });
  await rc.em.flush();
  announce(services, rc, PREFETCH_SUBMITTED_CHANNEL, { job_id: job.id });
  return job;
}

/** A job of this endpoint (another endpoint's job is a 404 here). */
export async function findPrefetch(rc: RequestContext, endpointId: string, jobId: string): Promise<PrefetchJob> {
  return found(await rc.em.findOne(PrefetchJob, { id: jobId, endpoint: endpointId }), 'Prefetch job');
}
