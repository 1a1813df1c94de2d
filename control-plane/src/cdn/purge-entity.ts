// Purge requests and prefetch jobs (document 3 §2; DESIGN.md §5). A purge is
// numbered by one platform-wide sequence (cdn_purge_sequence, migration 0015)
// in commit order, so an agent that reconnects can be sent every purge after
// the last one it applied; the fan-out itself belongs to the control channel.
import { defineEntity, p } from '@mikro-orm/core';
import { Endpoint } from './cdn.entities.ts';

export const PURGE_TYPES = ['path', 'wildcard', 'tag', 'all'] as const;
export type PurgeType = (typeof PURGE_TYPES)[number];
export const WORK_STATUSES = ['pending', 'in_progress', 'completed', 'failed'] as const;
export const PREFETCH_PRIORITIES = ['low', 'normal', 'high'] as const;

export interface FailedUrl { url: string; reason: string }

export const PurgeRequestSchema = defineEntity({
  name: 'PurgeRequest',
  tableName: 'cdn_purge_request',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    // null: a purge of every endpoint (a top-level purge naming no distribution and no URL).
    distribution: () => p.manyToOne(Endpoint).deleteRule('cascade').nullable(),
    sequence: p.bigint('number').unique('cdn_purge_request_sequence_key'),
    purge_type: p.enum(PURGE_TYPES),
    paths: p.json<string[]>(),
    tags: p.json<string[]>(),
    // A soft purge (migration 0050): marked stale at the edge instead of removed.
    soft: p.boolean().default(false),
    status: p.enum(WORK_STATUSES),
    edge_nodes_total: p.integer(),
    edge_nodes_completed: p.integer(),
    // Counted by the control channel as acks are stored (edge/channel-purges.ts); not part of the record.
    edge_nodes_failed: p.integer().default(0),
    // When the retention sweep deleted the purge's acks (its counts stay).
    acks_pruned_at: p.datetime().nullable(),
    // The caller's user id (no foreign key: the record outlives an erased account, whose row stays as a tombstone).
    submitted_by: p.uuid().nullable(),
    completed_at: p.datetime().nullable(),
    // The submission's Idempotency-Key (caller and key hash) and request fingerprint, claimed by the insert itself
    // (migration 0047); honoured for 24 hours. Not part of the record.
    idempotency_key: p.text().nullable().unique('cdn_purge_request_idempotency_key_key'),
    request_fingerprint: p.text().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  indexes: [
    { name: 'cdn_purge_request_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'cdn_purge_request_distribution_idx', properties: ['distribution', 'created_at'] },
    { name: 'cdn_purge_request_open_idx', expression: `create index cdn_purge_request_open_idx on cdn_purge_request (sequence) where status in ('pending', 'in_progress')` },
    { name: 'cdn_purge_request_ack_retention_idx', expression: 'create index cdn_purge_request_ack_retention_idx on cdn_purge_request (completed_at) where acks_pruned_at is null and completed_at is not null' },
  ],
});

/** A purge request just stored, as its columns (the submission writes it with a statement of its own). */
export interface StoredPurge {
  id: string;
  distribution_id: string | null;
  sequence: number;
  purge_type: PurgeType;
  paths: string[];
  tags: string[];
  soft: boolean;
  status: 'pending';
  edge_nodes_total: number;
  edge_nodes_completed: number;
  submitted_by: string | null;
  completed_at: null;
  created_at: Date;
  updated_at: Date;
}

export class PurgeRequest extends PurgeRequestSchema.class {}
PurgeRequestSchema.setClass(PurgeRequest);

export const PrefetchJobSchema = defineEntity({
  name: 'PrefetchJob',
  tableName: 'cdn_prefetch_job',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    endpoint: () => p.manyToOne(Endpoint).deleteRule('cascade'),
    urls: p.json<string[]>(),
    priority: p.enum(PREFETCH_PRIORITIES),
    status: p.enum(WORK_STATUSES),
    total: p.integer(),
    fetched: p.integer(),
    failed: p.integer(),
    failed_urls: p.json<FailedUrl[]>(),
    submitted_by: p.uuid().nullable(),
    completed_at: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  indexes: [{ name: 'cdn_prefetch_job_endpoint_idx', properties: ['endpoint', 'created_at'] }],
});
export class PrefetchJob extends PrefetchJobSchema.class {}
PrefetchJobSchema.setClass(PrefetchJob);
