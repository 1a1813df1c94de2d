// Purge fan-out (DESIGN.md §5 purge bullet, §7): purges reach every stream in
// sequence order, each encoded once and the same bytes written to every
// stream; an agent that reconnects gets every purge after the last one it
// applied, from the database. The purge sequence is commit order
// (cdn/purge-service.ts), so "everything after n" read from the database can
// never miss one that commits later with a smaller number.
//
// The feed keeps the purges this replica has seen recently (a ring covering
// the sequences (floor, cursor]): a live stream whose last pushed sequence is
// inside it is served from memory; a stream further behind reads pages from
// the database until it reaches the ring.
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ConnectResponseSchema, PurgeType } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { executeBound, idList, ids } from '../db/bulk.ts';
import { ONLINE } from './nodes-service.ts';

export interface PurgeRow {
  id: string;
  sequence: string | number;
  distribution_id: string;
  purge_type: 'path' | 'wildcard' | 'tag' | 'all';
  paths: string[];
  tags: string[];
}

export interface EncodedPurge {
  id: string;
  sequence: number;
  bytes: Uint8Array;
}

const PURGE_TYPE = { path: PurgeType.PATH, wildcard: PurgeType.WILDCARD, tag: PurgeType.TAG, all: PurgeType.ALL } as const;
const PURGE_COLUMNS = 'id, sequence, distribution_id, purge_type, paths, tags';

/** How many purges one database read brings (catch-up pages, and loads of new purges). */
export const PURGE_PAGE = 500;
/** How many recent purges the feed keeps encoded in memory. */
const RING_SIZE = 4_096;

export function encodePurge(row: PurgeRow): EncodedPurge {
  const sequence = Number(row.sequence);
  const bytes = encodeResponse(create(ConnectResponseSchema, {
    message: {
      case: 'purge',
      value: {
        sequence: BigInt(sequence), purgeId: row.id, endpointId: row.distribution_id, type: PURGE_TYPE[row.purge_type],
        paths: row.paths, tags: row.tags, nonce: randomUUID(),
      },
    },
  }));
  return { id: row.id, sequence, bytes };
}

export class PurgeFeed {
  readonly #em: () => EntityManager;
  #ring: EncodedPurge[] = [];
  readonly #bySequence = new Map<number, EncodedPurge>();
  /** The ring holds every committed purge with floor < sequence <= cursor. */
  #floor = 0;
  #cursor = 0;
  #loading: Promise<EncodedPurge[]> | null = null;
  #loadAgain = false;

  constructor(em: () => EntityManager) {
    this.#em = em;
  }

  get cursor(): number {
    return this.#cursor;
  }

  #started = false;

  /**
   * Reads the purges committed since the last read (one statement per page; concurrent calls share
   * one read, and a call during a read triggers one more); returns the new ones. The first read only
   * starts the ring at the platform's latest purge (streams behind it catch up from the database).
   */
  load(): Promise<EncodedPurge[]> {
    if (this.#loading) {
      this.#loadAgain = true;
      return this.#loading;
    }
    this.#loading = (async () => {
      const added: EncodedPurge[] = [];
      try {
        if (!this.#started) {
          const [row] = await this.#em().execute<{ latest: string }[]>(`select coalesce(max(sequence), 0)::text as latest from cdn_purge_request`);
          this.#floor = this.#cursor = Number(row?.latest ?? 0);
          this.#started = true;
          return added;
        }
        do {
          this.#loadAgain = false;
          for (;;) {
            const rows = await this.#em().execute<PurgeRow[]>(
              `select ${PURGE_COLUMNS} from cdn_purge_request where sequence > ? order by sequence limit ${PURGE_PAGE}`, [this.#cursor],
            );
            for (const row of rows) if (Number(row.sequence) > this.#cursor) added.push(this.#remember(encodePurge(row)));
            if (rows.length) this.#cursor = Math.max(this.#cursor, Number(rows[rows.length - 1]!.sequence));
            if (rows.length < PURGE_PAGE) break;
          }
        } while (this.#loadAgain);
      } finally {
        this.#loading = null;
      }
      return added;
    })();
    return this.#loading;
  }

  /**
   * A purge announced with its content: taken into the ring at once when it is the next one (the
   * purge before it is the feed's cursor: every purge committed before it is held, as sequence
   * order is commit order) and returned; null when the feed must read the database instead (it is
   * not started, a read is under way, or purges lie between). An older one than the cursor is
   * already held: [].
   */
  offer(row: PurgeRow): EncodedPurge[] | null {
    const sequence = Number(row.sequence);
    if (!this.#started || this.#loading) return null;
    if (sequence <= this.#cursor) return [];
    if (sequence !== this.#cursor + 1) return null;
    this.#cursor = sequence;
    return [this.#remember(encodePurge(row))];
  }

  #remember(purge: EncodedPurge): EncodedPurge {
    this.#ring.push(purge);
    this.#bySequence.set(purge.sequence, purge);
    if (this.#ring.length > RING_SIZE) {
      const dropped = this.#ring.splice(0, this.#ring.length - RING_SIZE);
      for (const old of dropped) this.#bySequence.delete(old.sequence);
      this.#floor = dropped[dropped.length - 1]!.sequence;
    }
    return purge;
  }

  /** The purges after `sequence` in order, from memory; null when the ring does not reach back that far. */
  after(sequence: number): EncodedPurge[] | null {
    if (!this.#started || sequence < this.#floor) return null;
    if (sequence >= this.#cursor) return [];
    // The ring is sorted by sequence: find the first entry after `sequence`.
    let lo = 0;
    let hi = this.#ring.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#ring[mid]!.sequence <= sequence) lo = mid + 1;
      else hi = mid;
    }
    return this.#ring.slice(lo);
  }

  /** A page of purges after `sequence` from the database (catch-up), reusing the ring's encodings. */
  async page(sequence: number): Promise<EncodedPurge[]> {
    const rows = await this.#em().execute<PurgeRow[]>(
      `select ${PURGE_COLUMNS} from cdn_purge_request where sequence > ? order by sequence limit ${PURGE_PAGE}`, [sequence],
    );
    return rows.map((row) => this.#bySequence.get(Number(row.sequence)) ?? encodePurge(row));
  }

  /**
   * What a stream opening now needs, read in one statement (one snapshot): the platform's latest purge
   * sequence (Welcome.purge_sequence) and the first page of purges after the agent's own.
   */
  async opening(agentSequence: number): Promise<{ latest: number; purges: EncodedPurge[] }> {
    const rows = await this.#em().execute<(Partial<PurgeRow> & { latest: string })[]>(
      `select l.latest::text as latest, p.* from (select coalesce(max(sequence), 0) as latest from cdn_purge_request) l
       left join lateral (select ${PURGE_COLUMNS} from cdn_purge_request where sequence > ? order by sequence limit ${PURGE_PAGE}) p on true`,
      [agentSequence],
    );
    const purges = rows.filter((r) => r.id).map((row) => this.#bySequence.get(Number(row.sequence)) ?? encodePurge(row as PurgeRow));
    return { latest: Number(rows[0]?.latest ?? 0), purges };
  }
}

export interface PurgeAckRow {
  purge_id: string;
  sequence: number;
  node_id: string;
  ok: boolean;
  error: string | null;
}

/**
 * The end of a statement that moves purges on from their acknowledgements: in_progress from the first ack,
 * failed as soon as a node reported a failure, completed once every node online now has acknowledged it;
 * edge_nodes_completed counts the successful acks (edge_nodes_total grows if more nodes answered than were
 * online when it was stored; a completed purge's count does not go back when a late, staler evaluation
 * lands after it). `targets` is a relation of purge ids (id), `acks` one of every ack of those purges
 * (purge_id, node_id, ok); `at` names the parameters: this replica's id and the time (placeholders, in the
 * order they appear when they are `?`). It returns each purge's new status and, when `at` names the replica,
 * how many online nodes other replicas serve (elsewhere_n; 0 without it).
 */
function movePurgesOn(targets: string, acks: string, at: { replica?: string; now: string }): string {
  return `online as (select id, replica_id from cdn_edge_node where ${ONLINE}),
     counts as (
       select t.id,
         count(k.node_id) filter (where k.ok)::int as ok_n,
         count(k.node_id) filter (where not k.ok)::int as failed_n,
         (select count(*) from online)::int - count(o.id) filter (where k.ok)::int as missing_n,
         ${at.replica ? `(select count(*) from online where replica_id is distinct from ${at.replica})::int` : '0'} as elsewhere_n
       from ${targets} t left join ${acks} k on k.purge_id = t.id left join online o on o.id = k.node_id
       group by t.id
     )
     update cdn_purge_request p set
       edge_nodes_completed = case when p.status = 'completed' then greatest(p.edge_nodes_completed, c.ok_n) else c.ok_n end,
       edge_nodes_total = greatest(p.edge_nodes_total, c.ok_n + c.failed_n),
       status = case
         when c.failed_n > 0 then 'failed'
         when c.missing_n = 0 then 'completed'
         when p.status = 'completed' then 'completed'
         when c.ok_n > 0 then 'in_progress'
         else p.status end,
       completed_at = case when p.completed_at is null and (c.failed_n > 0 or c.missing_n = 0) then ${at.now}::timestamptz else p.completed_at end,
       updated_at = ${at.now}
     from counts c
     where p.id = c.id
     returning p.id, p.status, c.elsewhere_n`;
}

/**
 * Stores acknowledgements, moves the nodes' purge_sequence to the highest purge they applied and moves the
 * purges on (movePurgesOn), in one statement with its parameters bound (executeBound): a flush of acks is
 * one round trip. A purge that no longer
 * exists (or a sequence that is not its own) is skipped. The rows travel grouped by purge ({p, s, ok: [node
 * ids], failed: [{n, e}]}): a thousand acks of one purge are about 40 KB of parameter instead of 150. The
 * statement's reads do not see its own inserts: a purge's acks are those stored before it (less the ones
 * this flush replaces) and this flush's.
 *
 * Nor does it see acks another replica is storing at the same moment: two replicas each storing the last
 * ack but one would both leave the purge in progress. So a purge left open while nodes of other replicas
 * are online is evaluated again by a second statement, which starts after this one committed: of two
 * racing replicas, the one that commits last sees both acks. With one replica (or one replica's nodes
 * alone) the second statement never runs.
 *
 * The acks of the purges are read with `purge_id = any(array(…))`, which the planner takes through the primary
 * key; `purge_id in (select …)` was planned as a sequential scan of cdn_purge_ack, which only grows (every flush
 * read all 300,000 acks after the benchmark's sustained purges, over a second per flush under load).
 */
export async function recordPurgeAcks(em: EntityManager, acks: readonly PurgeAckRow[], now: Date, replicaId: string): Promise<void> {
  if (!acks.length) return;
  const byPurge = new Map<string, { p: string; s: number; ok: string[]; failed: { n: string; e: string | null }[] }>();
  for (const ack of acks) {
    let group = byPurge.get(ack.purge_id);
    if (!group) byPurge.set(ack.purge_id, (group = { p: ack.purge_id, s: ack.sequence, ok: [], failed: [] }));
    if (ack.ok) group.ok.push(ack.node_id);
    else group.failed.push({ n: ack.node_id, e: ack.error });
  }
  const moved = await executeBound<MovedPurge>(em,
    `with g as (select jsonb_array_elements($1::jsonb) as j),
     x as (
       select (g.j->>'p')::uuid as purge_id, (g.j->>'s')::bigint as sequence, n.id::uuid as node_id, true as ok, null::text as error
       from g cross join lateral jsonb_array_elements_text(g.j->'ok') as n(id)
       union all
       select (g.j->>'p')::uuid, (g.j->>'s')::bigint, (f->>'n')::uuid, false, f->>'e'
       from g cross join lateral jsonb_array_elements(g.j->'failed') as f
     ),
     stored as (
       insert into cdn_purge_ack (purge_id, node_id, ok, error, acked_at)
       select x.purge_id, x.node_id, x.ok, x.error, $2::timestamptz from x
       join cdn_purge_request p on p.id = x.purge_id and p.sequence = x.sequence
       join cdn_edge_node n on n.id = x.node_id
       on conflict (purge_id, node_id) do update set ok = excluded.ok, error = excluded.error, acked_at = excluded.acked_at
       returning purge_id, node_id, ok
     ),
     applied as (
       update cdn_edge_node n set purge_sequence = m.s, updated_at = $2
       from (select node_id, max(sequence) as s from x where ok group by node_id) m
       where n.id = m.node_id and n.purge_sequence < m.s
     ),
     touched as (select distinct purge_id as id from stored),
     acks as (
       select a.purge_id, a.node_id, a.ok from cdn_purge_ack a
       where a.purge_id = any(array(select id from touched)) and not exists (select 1 from stored s where s.purge_id = a.purge_id and s.node_id = a.node_id)
       union all
       select purge_id, node_id, ok from stored
     ),
     ${movePurgesOn('touched', 'acks', { replica: '$3', now: '$2' })}`,
    [JSON.stringify([...byPurge.values()]), now, replicaId],
  );
  const racing = moved.filter((p) => p.elsewhere_n > 0 && (p.status === 'pending' || p.status === 'in_progress')).map((p) => p.id);
  if (racing.length) await evaluatePurges(em, racing, now);
}

interface MovedPurge { id: string; status: string; elsewhere_n: number }

/**
 * Moves purges on (movePurgesOn) from the acks stored: those listed, or every pending or in-progress purge
 * already fanned out ('open': when nodes went offline, a node that left no longer holds a purge back).
 */
export async function evaluatePurges(em: EntityManager, which: readonly string[] | 'open', now: Date): Promise<void> {
  if (which !== 'open' && !which.length) return;
  const selected = which === 'open'
    ? `select id from cdn_purge_request where status in ('pending', 'in_progress') and edge_nodes_total > 0`
    : `select id from cdn_purge_request where id = any(${idList})`;
  await em.execute(
    `with targets as (${selected}),
     acks as (select purge_id, node_id, ok from cdn_purge_ack where purge_id = any(array(select id from targets))),
     ${movePurgesOn('targets', 'acks', { now: '?' })}`,
    which === 'open' ? [now, now] : [ids(which), now, now],
  );
}
