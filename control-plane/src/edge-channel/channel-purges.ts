// The purges as the control channel reads and records them (DESIGN.md §5
// purge bullet, §7; the feed that writes them to streams is
// channel-purge-feed.ts): purges reach every stream in sequence order, each
// encoded once and the same bytes written to every stream; an agent that
// reconnects gets every purge after the last one it applied, from the
// database. The purge sequence is commit order (cdn/purge-service.ts), so
// "everything after n" read from the database can never miss one that
// commits later with a smaller number.
//
// The ring keeps the purges this replica has seen recently (the sequences
// (floor, cursor]): a live stream whose last pushed sequence is inside it is
// served from memory; a stream further behind reads pages from the database
// until it reaches the ring. The acknowledgements' statements follow.
import { randomUUID } from 'node:crypto';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import type { EntityManager } from '@mikro-orm/postgresql';
import { PurgeType } from '../../../shared/gen/edge/v1/control_pb.ts';
import { HOUR } from '../core/clock.ts';
import { executeBound, idList, ids } from '../db/bulk.ts';
import { ONLINE } from './nodes-service.ts';

export interface PurgeRow {
  id: string;
  sequence: string | number;
  /** null: every endpoint (the edge applies it to each endpoint it holds). */
  distribution_id: string | null;
  purge_type: 'path' | 'wildcard' | 'tag' | 'all';
  paths: string[];
  tags: string[];
  /** A soft purge (Purge.soft); absent in rows of older readers: false. */
  soft?: boolean;
}

export interface EncodedPurge {
  id: string;
  sequence: number;
  bytes: Uint8Array;
}

const PURGE_TYPE = { path: PurgeType.PATH, wildcard: PurgeType.WILDCARD, tag: PurgeType.TAG, all: PurgeType.ALL } as const;
const PURGE_COLUMNS = 'id, sequence, distribution_id, purge_type, paths, tags, soft';

/** How many purges one database read brings (catch-up pages, and loads of new purges). */
export const PURGE_PAGE = 500;
/**
 * An agent holding a cache that missed more purges than this drops its cache instead of replaying them
 * (Welcome.reset_cache, when its Hello accepts it): a node back after a long absence is not sent, and
 * does not ack, a million purges one by one, all of which a purge of everything covers.
 */
export const PURGE_REPLAY_LIMIT = 10_000;
/** How many recent purges the ring keeps encoded in memory. */
const RING_SIZE = 4_096;

/**
 * A purge as ConnectResponse bytes, written field by field (what toBinary(ConnectResponseSchema, …) writes for the
 * same message, byte for byte: channel-purges.test.ts; reflection cost several times as much on the submit path).
 * proto/edge/v1/control.proto: ConnectResponse.purge = 3; Purge sequence = 1, purge_id = 2, endpoint_id = 3,
 * type = 4, paths = 5, tags = 6, nonce = 7, soft = 8 (proto3: zero values are not written).
 */
export function encodePurge(row: PurgeRow): EncodedPurge {
  const sequence = Number(row.sequence);
  const endpointId = row.distribution_id ?? '';
  const w = new BinaryWriter();
  w.tag(3, WireType.LengthDelimited).fork();
  if (sequence !== 0) w.tag(1, WireType.Varint).uint64(sequence);
  if (row.id !== '') w.tag(2, WireType.LengthDelimited).string(row.id);
  if (endpointId !== '') w.tag(3, WireType.LengthDelimited).string(endpointId);
  w.tag(4, WireType.Varint).int32(PURGE_TYPE[row.purge_type]); // never UNSPECIFIED (0)
  for (const path of row.paths) w.tag(5, WireType.LengthDelimited).string(path);
  for (const tag of row.tags) w.tag(6, WireType.LengthDelimited).string(tag);
  w.tag(7, WireType.LengthDelimited).string(randomUUID());
  if (row.soft === true) w.tag(8, WireType.Varint).bool(true);
  w.join();
  return { id: row.id, sequence, bytes: w.finish() };
}

export class PurgeRing {
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
   * purge before it is the ring's cursor: every purge committed before it is held, as sequence
   * order is commit order) and returned; null when the ring must read the database instead (it is
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

  /** The purge numbered `sequence`, if the ring holds it. */
  at(sequence: number): EncodedPurge | undefined {
    return this.#bySequence.get(sequence);
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
   * sequence (Welcome.purge_sequence), where the stream starts (`start`), and the first page of purges
   * after that. It starts at the agent's own sequence, except:
   *   - an agent whose cache is empty starts just before the oldest purge still open, or at the latest when
   *     none is: it needs no finished purge, and the open ones must be able to count it;
   *   - an agent holding a cache that missed more than PURGE_REPLAY_LIMIT purges, and that obeys a reset
   *     (`acceptsReset`), starts there too and is told to drop its whole cache instead (`reset`).
   * A new agent is not sent the platform's whole purge history, nor is one back from a long absence.
   */
  async opening(agentSequence: number, cacheEmpty = false, acceptsReset = false): Promise<{ latest: number; start: number; reset: boolean; purges: EncodedPurge[] }> {
    const rows = await this.#em().execute<(Partial<PurgeRow> & { latest: string; start: string; reset: boolean })[]>(
      `select l.latest::text as latest, s.start::text as start, r.reset, p.* from (select coalesce(max(sequence), 0) as latest from cdn_purge_request) l
       cross join (select ?::boolean as empty, ?::boolean as accepts_reset, ?::bigint as own) a
       cross join lateral (select not a.empty and a.accepts_reset and l.latest - a.own > ${PURGE_REPLAY_LIMIT} as reset) r
       cross join lateral (select case when a.empty or r.reset then greatest(a.own, coalesce(
         (select min(sequence) - 1 from cdn_purge_request where status in ('pending', 'in_progress')), l.latest)) else a.own end as start) s
       left join lateral (select ${PURGE_COLUMNS} from cdn_purge_request where sequence > s.start order by sequence limit ${PURGE_PAGE}) p on true`,
      [cacheEmpty, acceptsReset, agentSequence],
    );
    const purges = rows.filter((r) => r.id).map((row) => this.#bySequence.get(Number(row.sequence)) ?? encodePurge(row as PurgeRow));
    return { latest: Number(rows[0]?.latest ?? 0), start: Number(rows[0]?.start ?? agentSequence), reset: rows[0]?.reset === true, purges };
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
 * The nodes that must apply a purge (issue 21 item 5): those online when it was stored, which is those whose
 * current stream opened before it and that are online still or went offline after it, and those whose stream
 * before the current one covered it (a node that dropped out and is back, catching up). `p` names a relation
 * with the purge's created_at, `n` cdn_edge_node. A target stays one until it has applied the purge or the
 * purge times out (failLatePurges); a node that drops out twice before it has caught up is no longer held to
 * the purges of its first stream (it answers nothing from its cache until it has caught up).
 */
const targetOf = (p: string, n: string) => `(${n}.connected_at <= ${p}.created_at and (${n}.${ONLINE} or ${n}.offline_at > ${p}.created_at)
    or ${n}.previous_connected_at <= ${p}.created_at and ${p}.created_at < ${n}.offline_at and ${n}.offline_at <= ${n}.connected_at)`;

/**
 * Whether target `n` has not applied purge `p` (a relation with its id and sequence) by what is stored: no ok
 * acknowledgement (probed by its key) and a purge_sequence below it (a node that started from a later purge,
 * its cache empty or dropped, has nothing this purge could remove).
 */
const notApplied = (p: string, n: string, acks: string) =>
  `${n}.purge_sequence < ${p}.sequence and not exists (select 1 from ${acks} k where k.purge_id = ${p}.id and k.node_id = ${n}.id and k.ok)`;

/**
 * The transition failed -> completed of a purge (`p`, before the update): a node it timed out on applied it
 * later (an ok acknowledgement, or its purge sequence past the purge: recoverLatePurges) and no failure is
 * left. Its completed_at then says when it completed, no longer when it failed.
 */
const LATE_COMPLETION = `p.status = 'failed'`;

/**
 * The end of a statement that counts purges again from their acknowledgements and moves them on:
 * in_progress from the first ack, failed as soon as a node reported a failure (or failLatePurges recorded
 * one), completed once every target has applied it (a purge without target, stored while no node was online,
 * once a node applied it); edge_nodes_completed and edge_nodes_failed count the acks (edge_nodes_total grows if
 * more nodes answered than were online when it was stored; a completed purge's count does not go back when a
 * late, staler evaluation lands after it). `targets` is a relation of purge ids (id), `acks` one of every ack
 * of those purges (purge_id, node_id, ok); `now` names the time parameter.
 */
function movePurgesOn(targets: string, acks: string, now: string): string {
  return `counts as (
       select t.id,
         count(k.node_id) filter (where k.ok)::int as ok_n,
         count(k.node_id) filter (where not k.ok)::int as failed_n
       from ${targets} t left join ${acks} k on k.purge_id = t.id
       group by t.id
     ),
     missing as (
       select r.id, count(*)::int as n
       from ${targets} t join cdn_purge_request r on r.id = t.id join cdn_edge_node n on ${targetOf('r', 'n')}
       where ${notApplied('r', 'n', acks)}
       group by r.id
     )
     update cdn_purge_request p set
       edge_nodes_completed = case when p.status = 'completed' then greatest(p.edge_nodes_completed, c.ok_n) else c.ok_n end,
       edge_nodes_failed = c.failed_n,
       edge_nodes_total = greatest(p.edge_nodes_total, c.ok_n + c.failed_n),
       status = case
         when c.failed_n > 0 then 'failed'
         when m.n is null and (p.edge_nodes_total > 0 or c.ok_n > 0) then 'completed'
         when p.status = 'completed' then 'completed'
         when c.ok_n > 0 then 'in_progress'
         else p.status end,
       completed_at = case
         when ${LATE_COMPLETION} and c.failed_n = 0 and m.n is null and (p.edge_nodes_total > 0 or c.ok_n > 0)
           or p.completed_at is null and (c.failed_n > 0 or (m.n is null and (p.edge_nodes_total > 0 or c.ok_n > 0))) then ${now}::timestamptz
         else p.completed_at end,
       updated_at = ${now}
     from counts c left join missing m on m.id = c.id
     where p.id = c.id`;
}

/**
 * Stores acknowledgements and adds them to their purges' counts, in one statement with its parameters bound
 * (executeBound): a flush of acks is one round trip, whatever the number of acks. A purge that no longer
 * exists (or a sequence that is not its own), or whose acks the retention sweep has deleted, is skipped. The
 * rows travel grouped by purge ({p, s, ok: [node ids], failed: [{n, e}]}): a thousand acks of one purge are
 * about 40 KB of parameter instead of 150.
 *
 * The counts grow by what this flush changed: a new ack adds one, an ack that turns from failed to ok or back
 * (the only change stored: the upsert's `where`) moves one from a count to the other. Inserted and updated rows
 * are told apart by xmax, which is 0 only on a row version the statement inserted. Counting every ack of the
 * purge again at each flush read them all: under a backlog (a flush holding parts of hundreds of purges) one
 * flush read 267,000 acks and sorted them on disk, took two seconds, held the rows it updated meanwhile, and the
 * next flush was bigger still.
 *
 * Completion needs every target's ok (targetOf), which counts cannot tell (an ack may come from a node that
 * joined later): for a purge whose ok count reaches its number of targets, the statement looks for a target
 * without an ok among this flush's acks or those stored (one index probe per node, for those purges only), and
 * completes it when there is none. Two replicas storing the last acks of a purge at the
 * same moment each look from a snapshot without the other's; their updates of the purge's row take turns and
 * the later one adds to the counts the first committed, so a purge whose counts say complete but which was not
 * completed is counted again from its acks (evaluatePurges) by a second statement, after this one committed:
 * it sees both replicas' acks.
 *
 * The node's purge_sequence does not move here: it travels with the node's heartbeat-rate writes.
 */
export async function recordPurgeAcks(em: EntityManager, acks: readonly PurgeAckRow[], now: Date): Promise<void> {
  if (!acks.length) return;
  const byPurge = new Map<string, { p: string; s: number; ok: string[]; failed: { n: string; e: string | null }[] }>();
  for (const ack of acks) {
    let group = byPurge.get(ack.purge_id);
    if (!group) byPurge.set(ack.purge_id, (group = { p: ack.purge_id, s: ack.sequence, ok: [], failed: [] }));
    if (ack.ok) group.ok.push(ack.node_id);
    else group.failed.push({ n: ack.node_id, e: ack.error });
  }
  const counted = await executeBound<{ id: string; recount: boolean }>(em,
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
       join cdn_purge_request p on p.id = x.purge_id and p.sequence = x.sequence and p.acks_pruned_at is null
       join cdn_edge_node n on n.id = x.node_id
       on conflict (purge_id, node_id) do update set ok = excluded.ok, error = excluded.error, acked_at = excluded.acked_at, timed_out = false
         where cdn_purge_ack.ok <> excluded.ok
       returning purge_id, node_id, ok, xmax = 0 as inserted
     ),
     added as (
       select purge_id as id,
         (count(*) filter (where ok) - count(*) filter (where not ok and not inserted))::int as ok_n,
         (count(*) filter (where not ok) - count(*) filter (where ok and not inserted))::int as failed_n
       from stored group by purge_id
     ),
     due as (
       select a.id, p.sequence, p.created_at from added a join cdn_purge_request p on p.id = a.id
       where p.status <> 'completed' and p.edge_nodes_failed + a.failed_n = 0 and p.edge_nodes_completed + a.ok_n >= greatest(p.edge_nodes_total, 1)
     ),
     missing as (
       select d.id from due d join cdn_edge_node n on ${targetOf('d', 'n')}
       left join stored s on s.purge_id = d.id and s.node_id = n.id and s.ok
       where s.node_id is null and ${notApplied('d', 'n', 'cdn_purge_ack')}
       group by d.id
     ),
     complete as (select id from due except select id from missing)
     update cdn_purge_request p set
       edge_nodes_completed = p.edge_nodes_completed + a.ok_n,
       edge_nodes_failed = p.edge_nodes_failed + a.failed_n,
       edge_nodes_total = greatest(p.edge_nodes_total, p.edge_nodes_completed + a.ok_n + p.edge_nodes_failed + a.failed_n),
       status = case
         when p.edge_nodes_failed + a.failed_n > 0 then 'failed'
         when p.status = 'completed' then 'completed'
         when c.id is not null then 'completed'
         when p.edge_nodes_completed + a.ok_n > 0 then 'in_progress'
         else p.status end,
       completed_at = case
         when ${LATE_COMPLETION} and c.id is not null then $2::timestamptz
         when p.completed_at is null and (p.edge_nodes_failed + a.failed_n > 0 or c.id is not null) then $2::timestamptz
         else p.completed_at end,
       updated_at = $2
     from added a left join complete c on c.id = a.id
     where p.id = a.id
     returning p.id, (p.status <> 'completed' and p.edge_nodes_failed = 0 and p.edge_nodes_completed >= greatest(p.edge_nodes_total, 1)) as recount`,
    [JSON.stringify([...byPurge.values()]), now],
  );
  const complete = counted.filter((p) => p.recount).map((p) => p.id);
  if (complete.length) await evaluatePurges(em, complete, now);
}

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
     ${movePurgesOn('targets', 'acks', '?')}`,
    which === 'open' ? [now, now] : [ids(which), now, now],
  );
}

/**
 * The targets of open purges stored before `before` that have not applied them are recorded as failed
 * (a failed acknowledgement naming why: offline since when, or no answer), and those purges moved on, so
 * a purge waits for a node that dropped out at most that long (marked timed_out). A node that applies the purge later turns
 * its failure into an ok (recordPurgeAcks), which may complete the purge after all. Run on every tick by
 * every replica (the insert skips what another replica recorded). Returns the purges it failed.
 */
export async function failLatePurges(em: EntityManager, before: Date, now: Date, waited: string): Promise<string[]> {
  const rows = await em.execute<{ purge_id: string }[]>(
    `with late as (
       select id, sequence, created_at from cdn_purge_request
       where status in ('pending', 'in_progress') and edge_nodes_total > 0 and created_at < ?
       order by sequence limit 100
     ),
     missing as (
       select l.id as purge_id, n.id as node_id,
         case when n.${ONLINE} then 'did not acknowledge it within ' || ?::text
           else 'offline' || coalesce(' since ' || to_char(n.offline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '') || ': did not apply it within ' || ?::text end as error
       from late l join cdn_edge_node n on ${targetOf('l', 'n')}
       where ${notApplied('l', 'n', 'cdn_purge_ack')}
     ),
     stored as (
       insert into cdn_purge_ack (purge_id, node_id, ok, error, acked_at, timed_out)
       select purge_id, node_id, false, error, ?, true from missing
       on conflict (purge_id, node_id) do nothing
       returning purge_id
     )
     select distinct purge_id from stored`,
    [before, waited, waited, now],
  );
  const failed = rows.map((r) => r.purge_id);
  if (failed.length) await evaluatePurges(em, failed, now);
  return failed;
}

/**
 * The per-node transition failed (timed out) -> applied: a node recorded failed by failLatePurges whose purge
 * sequence has since reached the purge's applied it after all, though no acknowledgement says so (the stream it
 * was pushed on ended before it answered, or it came back with an empty cache, which the purge has nothing to
 * remove from). Its failure turns into an ok and its purges are moved on, to completed when nothing else is
 * missing. A failure the node reported itself stays (its sequence moves past a purge it could not apply).
 * Run on every tick by every replica after failLatePurges (the partial index holds the timed-out failures only);
 * returns the purges it moved on.
 */
export async function recoverLatePurges(em: EntityManager, now: Date): Promise<string[]> {
  const rows = await em.execute<{ purge_id: string }[]>(
    `with recovered as (
       update cdn_purge_ack k set ok = true, error = null, timed_out = false, acked_at = ?
       from cdn_purge_request p, cdn_edge_node n
       where k.timed_out and not k.ok and p.id = k.purge_id and n.id = k.node_id
         and p.acks_pruned_at is null and n.purge_sequence >= p.sequence
       returning k.purge_id
     )
     select distinct purge_id from recovered`,
    [now],
  );
  const recovered = rows.map((r) => r.purge_id);
  if (recovered.length) await evaluatePurges(em, recovered, now);
  return recovered;
}

/** How long the acknowledgements of a finished purge are kept; its counts stay on the record after. */
export const PURGE_ACK_RETENTION_MS = HOUR;
/** Purges whose acks one statement deletes (about a thousand acks each with a thousand nodes). */
const PRUNE_BATCH = 20;

/**
 * Deletes the acknowledgements of purges finished (completed or failed) before `before`, a batch of purges
 * per statement, oldest first, until none is left or `signal` aborts; returns how many purges it pruned.
 * A pruned purge takes no further acks (recordPurgeAcks skips it), so its counts stay as they were; the
 * batch is claimed with SKIP LOCKED, so replicas running this at once share the work.
 */
export async function prunePurgeAcks(em: EntityManager, before: Date, now: Date, signal?: AbortSignal): Promise<number> {
  let pruned = 0;
  while (!signal?.aborted) {
    const rows = await em.execute<{ id: string }[]>(
      `with due as (
         select id from cdn_purge_request
         where acks_pruned_at is null and completed_at is not null and completed_at < ?
         order by completed_at limit ${PRUNE_BATCH} for update skip locked
       ),
       gone as (delete from cdn_purge_ack where purge_id = any(array(select id from due)))
       update cdn_purge_request p set acks_pruned_at = ? from due where p.id = due.id returning p.id`,
      [before, now],
    );
    pruned += rows.length;
    if (rows.length < PRUNE_BATCH) break;
  }
  return pruned;
}
