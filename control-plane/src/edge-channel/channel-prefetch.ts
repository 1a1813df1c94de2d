// Prefetch fan-out (document 3 §2 "Prefetch job"): a job goes to the nodes
// online when it is handed out that hold the endpoint's configuration (their
// applied version contains the endpoint's latest change); each targeted node
// gets a row in cdn_prefetch_result ("sent"), fixed by the first replica that
// hands the job out, so every replica counts the same targets. The job's
// counts come from the nodes' answers: a URL is fetched when every node that
// answered fetched it, failed when any node failed it (failed_urls names the
// reason and the node); the job completes when every target answered or went
// offline, and fails when every URL failed.
//
// As a feed of the session layer (channel-feed.ts): jobs are handed out when
// announced (PREFETCH_SUBMITTED_CHANNEL) and on every tick (those this
// replica has not handed out, and those no node could take within the wait
// fail); a stream that opens gets the jobs still awaiting its node's answer;
// PREFETCH acks are buffered in the channel's writer and stored per flush.
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import { AckKind, ConnectResponseSchema, type Ack } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { type FailedUrl, PREFETCH_SUBMITTED_CHANNEL } from '../cdn/index.ts';
import { HOUR } from '../core/clock.ts';
import { idList, ids, recordset } from '../db/bulk.ts';
import { UUID, agentText, type ChannelContext, type Feed } from './channel-feed.ts';
import type { AgentStream } from './channel-stream.ts';
import type { ChannelWriter, FleetChange, PartBatch, WriterPart } from './channel-writer.ts';
import type { ConfigSource } from '../cdn-config/index.ts';
import { ONLINE } from './nodes-service.ts';

/** How long a prefetch job waits for a node that can take it; then it fails, naming why for each URL. */
export const PREFETCH_TARGET_WAIT_MS = HOUR;

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

/** Answers buffered in the channel's writer (one per job and node); when nodes went offline, the jobs waiting on them are counted again. */
class PrefetchAnswerBuffer implements WriterPart {
  readonly #writer: ChannelWriter;
  #answers = new Map<string, PrefetchAnswer>();

  constructor(writer: ChannelWriter) {
    this.#writer = writer;
    writer.add(this);
  }

  get urgent(): boolean {
    return this.#answers.size > 0;
  }

  get routine(): boolean {
    return false;
  }

  add(answer: PrefetchAnswer): void {
    this.#answers.set(`${answer.job_id}|${answer.node_id}`, answer);
    this.#writer.acked();
  }

  take(_routine: boolean, fleet: FleetChange): PartBatch | null {
    if (!this.#answers.size && !fleet.offline.length) return null;
    const answers = [...this.#answers.values()];
    this.#answers = new Map();
    return {
      write: async (em, now) => {
        if (answers.length) await evaluatePrefetchJobs(em, await recordPrefetchAnswers(em, answers), now);
        if (fleet.offline.length) await evaluatePrefetchJobs(em, await openJobsOf(em, fleet.offline), now);
      },
      putBack: () => {
        for (const a of answers) if (!this.#answers.has(`${a.job_id}|${a.node_id}`)) this.#answers.set(`${a.job_id}|${a.node_id}`, a);
      },
    };
  }
}

/** What the prefetch feed keeps for one stream: the jobs sent and not yet answered (job id → its URLs: an answer may only name these). */
export interface PrefetchState {
  readonly stream: AgentStream;
  readonly jobs: Map<string, ReadonlySet<string>>;
}

export class PrefetchFeed implements Feed<PrefetchState> {
  readonly name = 'prefetch jobs';
  readonly ackKinds = [AckKind.PREFETCH];
  readonly subjects: Feed['subjects'];
  readonly #context: ChannelContext;
  readonly #source: () => ConfigSource | undefined;
  readonly #answers: PrefetchAnswerBuffer;
  /** The stream of each node held here. */
  readonly #byNode = new Map<string, PrefetchState>();
  /** Prefetch jobs this replica has handed out: job id → when. */
  readonly #dispatched = new Map<string, number>();

  constructor(context: ChannelContext, source: () => ConfigSource | undefined) {
    this.#context = context;
    this.#source = source;
    this.#answers = new PrefetchAnswerBuffer(context.writer);
    this.subjects = {
      [PREFETCH_SUBMITTED_CHANNEL]: (m) => {
        if (typeof m.job_id === 'string' && UUID.test(m.job_id)) void context.safely('prefetch fan-out', () => this.#dispatch(m.job_id as string));
      },
    };
  }

  attach(stream: AgentStream): PrefetchState {
    const state: PrefetchState = { stream, jobs: new Map() };
    this.#byNode.set(stream.nodeId, state);
    return state;
  }

  detach(stream: AgentStream, state: PrefetchState): void {
    if (this.#byNode.get(stream.nodeId) === state) this.#byNode.delete(stream.nodeId);
  }

  /**
   * The jobs still awaiting this node's answer (sent on an earlier stream, or handed out while this one was
   * opening): sent again, so a reconnect does not leave a job waiting for an answer that no stream would
   * accept. Fetching a URL twice is harmless.
   */
  async open(stream: AgentStream, state: PrefetchState): Promise<void> {
    for (const job of await openJobsFor(this.#context.em(), stream.nodeId)) {
      if (stream.closed) return;
      if (state.jobs.has(job.jobId)) continue;
      state.jobs.set(job.jobId, new Set(job.urls));
      stream.write(job.bytes);
    }
  }

  onAck(stream: AgentStream, state: PrefetchState, ack: Ack): void {
    const jobId = ack.id.toLowerCase();
    const urls = state.jobs.get(jobId);
    if (!urls) return;
    state.jobs.delete(jobId);
    const seen = new Set<string>();
    const failedUrls = ack.failedUrls.filter((f) => urls.has(f.url) && !seen.has(f.url) && seen.add(f.url))
      .map((f) => ({ url: f.url, reason: agentText(f.reason, 300) || 'failed' }));
    const error = !ack.ok && !failedUrls.length ? agentText(ack.error, 300) || 'failed' : null;
    this.#answers.add({
      job_id: jobId, node_id: stream.nodeId, fetched: error ? 0 : urls.size - failedUrls.length, failed: error ? urls.size : failedUrls.length,
      failed_urls: failedUrls, error, acked_at: this.#context.clock.now(),
    });
  }

  async #dispatch(jobId: string): Promise<void> {
    if (this.#dispatched.has(jobId)) return;
    this.#dispatched.set(jobId, Date.now());
    let dispatch;
    try {
      dispatch = await prepareDispatch(this.#context.em(), this.#source(), jobId, this.#context.clock.now());
    } catch (error) {
      this.#dispatched.delete(jobId); // the next poll tries again
      throw error;
    }
    if (!dispatch) return;
    // No node could take it yet (none online holds the endpoint): it waits, and the poll hands it out again.
    if (!dispatch.targets.size) {
      this.#dispatched.delete(jobId);
      return;
    }
    const urls = new Set(dispatch.urls);
    for (const nodeId of dispatch.targets) {
      const state = this.#byNode.get(nodeId);
      if (!state?.stream.welcomed) continue;
      state.jobs.set(dispatch.jobId, urls);
      state.stream.write(dispatch.bytes);
    }
  }

  /** Hands out the open jobs this replica has not (jobs submitted within the wait); fails the jobs no node could take within it. */
  async poll(): Promise<void> {
    const cutoff = Date.now() - 2 * PREFETCH_TARGET_WAIT_MS;
    for (const [id, at] of this.#dispatched) if (at < cutoff) this.#dispatched.delete(id);
    const now = this.#context.clock.now();
    const waitStart = new Date(now.getTime() - PREFETCH_TARGET_WAIT_MS);
    const em = this.#context.em();
    const open = await em.execute<{ id: string }[]>(`select id from cdn_prefetch_job where status in ('pending', 'in_progress') and created_at > ?`, [waitStart]);
    for (const { id } of open) if (!this.#dispatched.has(id)) await this.#dispatch(id);
    const untaken = await em.execute<{ id: string }[]>(
      `select j.id from cdn_prefetch_job j where j.status = 'pending' and j.created_at <= ?
         and not exists (select 1 from cdn_prefetch_result r where r.job_id = j.id) limit 100`,
      [waitStart],
    );
    if (untaken.length) await evaluatePrefetchJobs(em, untaken.map((j) => j.id), now);
  }
}
