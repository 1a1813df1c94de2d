// Prefetch fan-out (document 3 §2 "Prefetch job"): a job goes to the nodes
// online when it is handed out that hold the endpoint's configuration (their
// applied version contains the endpoint's latest change); each targeted node
// gets a row in cdn_prefetch_result ("sent"), fixed by the first replica that
// hands the job out, so every replica counts the same targets. The job's
// counts come from the nodes' answers: a URL is fetched when every node that
// answered fetched it, failed when any node failed it (failed_urls names the
// reason and the node); the job completes when every target answered or went
// offline, and fails when every URL failed.
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ConnectResponseSchema } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import type { FailedUrl } from '../cdn/purge-entity.ts';
import { idList, ids, recordset } from '../db/bulk.ts';
import type { ConfigSource } from './contracts.ts';
import { ONLINE } from './nodes-service.ts';

export interface PrefetchDispatch {
  jobId: string;
  urls: string[];
  /** The pre-encoded PrefetchJob, the same bytes for every stream. */
  bytes: Uint8Array;
  /** The targeted nodes (all replicas). */
  targets: Set<string>;
}

/** Reason given for every URL of a job no node could take. */
export const NO_TARGET_REASON = 'no online edge node holds the endpoint\'s configuration';
const OFFLINE_REASON = 'the edge node went offline before answering';
const MAX_REASON = 500;

/**
 * Hands a pending or in-progress job out: fixes its targets (once, on whichever replica comes first) and
 * returns what to write to the targeted streams; null when the job is not open (gone, or finished).
 */
export async function prepareDispatch(em: EntityManager, source: ConfigSource | undefined, jobId: string, now: Date): Promise<PrefetchDispatch | null> {
  const [job] = await em.execute<{ id: string; endpoint_id: string; urls: string[]; priority: string; status: string }[]>(
    `select id, endpoint_id, urls, priority, status from cdn_prefetch_job where id = ? and status in ('pending', 'in_progress')`, [jobId],
  );
  if (!job) return null;
  const entry = (await source?.active())?.manifest.get(`endpoint/${job.endpoint_id}`);
  if (entry) {
    await em.execute(
      `insert into cdn_prefetch_result (job_id, node_id, state, fetched, failed, failed_urls, error, sent_at, acked_at)
       select ?, id, 'sent', 0, 0, '[]'::jsonb, null, ?, null from cdn_edge_node where status = 'online' and config_version >= ?
       on conflict (job_id, node_id) do nothing`,
      [job.id, now, entry.version],
    );
  }
  const targets = await em.execute<{ node_id: string }[]>(`select node_id from cdn_prefetch_result where job_id = ? and state = 'sent'`, [job.id]);
  return { jobId: job.id, urls: job.urls, bytes: encodeJob(job), targets: new Set(targets.map((t) => t.node_id)) };
}

function encodeJob(job: { id: string; endpoint_id: string; urls: string[]; priority: string }): Uint8Array {
  return encodeResponse(create(ConnectResponseSchema, {
    message: { case: 'prefetchJob', value: { jobId: job.id, endpointId: job.endpoint_id, urls: job.urls, priority: job.priority, nonce: randomUUID() } },
  }));
}

/** The open jobs that still await this node's answer, encoded. */
export async function openJobsFor(em: EntityManager, nodeId: string): Promise<{ jobId: string; urls: string[]; bytes: Uint8Array }[]> {
  const jobs = await em.execute<{ id: string; endpoint_id: string; urls: string[]; priority: string }[]>(
    `select j.id, j.endpoint_id, j.urls, j.priority from cdn_prefetch_result r join cdn_prefetch_job j on j.id = r.job_id
     where r.node_id = ? and r.state = 'sent' and j.status in ('pending', 'in_progress') order by j.created_at`,
    [nodeId],
  );
  return jobs.map((job) => ({ jobId: job.id, urls: job.urls, bytes: encodeJob(job) }));
}

export interface PrefetchAnswer {
  job_id: string;
  node_id: string;
  fetched: number;
  failed: number;
  failed_urls: FailedUrl[];
  error: string | null;
  acked_at: Date;
}

/** Stores the nodes' answers (one statement; only for a node still awaited on that job); returns the jobs touched. */
export async function recordPrefetchAnswers(em: EntityManager, answers: readonly PrefetchAnswer[]): Promise<string[]> {
  if (!answers.length) return [];
  const rows = await em.execute<{ job_id: string }[]>(
    `update cdn_prefetch_result r set state = 'done', fetched = x.fetched, failed = x.failed, failed_urls = x.failed_urls, error = x.error, acked_at = x.acked_at
     from ${recordset({ job_id: 'uuid', node_id: 'uuid', fetched: 'int', failed: 'int', failed_urls: 'jsonb', error: 'text', acked_at: 'timestamptz' })}
     where r.job_id = x.job_id and r.node_id = x.node_id and r.state = 'sent'
     returning r.job_id`,
    [JSON.stringify(answers)],
  );
  return [...new Set(rows.map((r) => r.job_id))];
}

/** The jobs still open that wait on any of these nodes (to re-evaluate when they go offline). */
export async function openJobsOf(em: EntityManager, nodeIds: readonly string[]): Promise<string[]> {
  if (!nodeIds.length) return [];
  const rows = await em.execute<{ job_id: string }[]>(
    `select distinct r.job_id from cdn_prefetch_result r join cdn_prefetch_job j on j.id = r.job_id
     where r.node_id = any(${idList}) and r.state = 'sent' and j.status in ('pending', 'in_progress')`,
    [ids(nodeIds)],
  );
  return rows.map((r) => r.job_id);
}

const clip = (text: string) => (text.length > MAX_REASON ? `${text.slice(0, MAX_REASON - 1)}…` : text);

/** Recomputes each job's counts and status from its targets' answers (see the header). */
export async function evaluatePrefetchJobs(em: EntityManager, jobIds: readonly string[], now: Date): Promise<void> {
  for (const jobId of jobIds) {
    const [job] = await em.execute<{ urls: string[]; status: string }[]>(`select urls, status from cdn_prefetch_job where id = ?`, [jobId]);
    if (!job || job.status === 'completed' || job.status === 'failed') continue;
    const results = await em.execute<{ state: string; failed_urls: FailedUrl[]; error: string | null; hostname: string; online: boolean }[]>(
      `select r.state, r.failed_urls, r.error, n.hostname, (n.${ONLINE}) as online
       from cdn_prefetch_result r join cdn_edge_node n on n.id = r.node_id where r.job_id = ? order by n.hostname, n.id`,
      [jobId],
    );
    const answered = results.filter((r) => r.state === 'done');
    const waiting = results.filter((r) => r.state === 'sent' && r.online);
    const reasons = new Map<string, string[]>();
    const fail = (url: string, reason: string) => {
      const list = reasons.get(url) ?? [];
      list.push(reason);
      reasons.set(url, list);
    };
    for (const r of answered) {
      if (r.failed_urls.length) for (const f of r.failed_urls) fail(f.url, `${f.reason} (node ${r.hostname})`);
      else if (r.error) for (const url of job.urls) fail(url, `${r.error} (node ${r.hostname})`);
    }
    if (!waiting.length && !answered.length) {
      const reason = results.length ? OFFLINE_REASON : NO_TARGET_REASON;
      for (const url of job.urls) fail(url, reason);
    }
    const failedUrls = job.urls.filter((url) => reasons.has(url)).map((url) => ({ url, reason: clip(reasons.get(url)!.join('; ')) }));
    const fetched = answered.length ? job.urls.length - failedUrls.length : 0;
    const finished = waiting.length === 0;
    const status = !finished ? (answered.length ? 'in_progress' : 'pending') : failedUrls.length === job.urls.length ? 'failed' : 'completed';
    await em.execute(
      `update cdn_prefetch_job set status = ?, fetched = ?, failed = ?, failed_urls = ?::jsonb, completed_at = ?, updated_at = ?
       where id = ? and status in ('pending', 'in_progress')`,
      [status, fetched, failedUrls.length, JSON.stringify(failedUrls), finished ? now : null, now, jobId],
    );
  }
}
