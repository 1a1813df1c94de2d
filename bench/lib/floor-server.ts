// The floor of the control-channel benchmark (issue 12): a bare stream server
// that pushes one Purge-like message to every connected agent and waits until
// every agent has acknowledged it, with no database and no bookkeeping. Two
// libraries, one process each:
//   grpc-js   @grpc/grpc-js Server with edgeControlService; the push is encoded
//             once (encodeResponse) and the same bytes are written to every stream
//   connect   @connectrpc/connect-node (connectNodeAdapter on http2.createServer,
//             gRPC over h2c); each stream's handler yields the same message
//             object, which connect-es serializes per stream (it takes no
//             pre-encoded bytes)
// Both answer Hello with a Welcome and read (and ignore) heartbeats.
//
// With `--durable <postgres url>` (grpc-js only) the process is also the floor
// of a *stored* purge, the least a purge with a status needs and no more: a
// plain node:http server takes `POST /purge`, inserts the purge row (one raw
// `pg` statement, inlined literals as the control plane's ORM sends them: one
// write), answers 202 with its id and sequence, pushes it to every stream and,
// once every agent acked, stores the acks and completes the row in one
// statement. No authentication, rate limit, idempotency, pub/sub, validation
// or coalescing: the difference to the bare floor is what any HTTP-submitted,
// PostgreSQL-recorded purge costs on this host, whatever does the rest.
//
// Run as a child with an IPC channel: node --expose-gc bench/lib/floor-server.ts grpc-js|connect [--durable <url>]
//   → {type: 'ready', port, httpPort?}
//   ← {type: 'measure', n, rounds, warmup}  → {type: 'measured', ...Measured} or {type: 'error', message}
//   ← {type: 'streams'}                     → {type: 'streams', n}
//   ← {type: 'stored'}                      → {type: 'stored', purges, completed, acks} (with --durable, once no purge is open)
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import * as grpc from '@grpc/grpc-js';
import pg from 'pg';
import {
  ConnectResponseSchema, EdgeControlService, PurgeType, type ConnectRequest, type ConnectResponse,
} from '../../shared/gen/edge/v1/control_pb.ts';
import { edgeControlService, encodeResponse, type OutgoingResponse } from '../../shared/src/proto/edge-control.ts';

export type FloorLibrary = 'grpc-js' | 'connect';

export interface Measured {
  library: FloorLibrary;
  streams: number;
  /** publish → all-acked per measured round, ms. */
  latencies: number[];
  /** CPU time of this process over the measured rounds, ms (user + system). */
  cpuMs: number;
  wallMs: number;
  /** RSS with N idle streams (after a GC) and right after the rounds; peak RSS of the process. */
  rssIdle: number;
  rssAfter: number;
  rssPeak: number;
  /** V8 heap in use after a GC, idle and after the rounds. */
  heapIdle: number;
  heapAfter: number;
}

const ROUND_TIMEOUT_MS = 60_000;
const WELCOME = { heartbeatIntervalMs: 5_000, trafficReportIntervalMs: 60_000 };

/** The purge pushed in round `sequence`, as the control plane would send a platform-wide purge-all. */
export function purgeMessage(sequence: bigint, purgeId: string = randomUUID()): ConnectResponse {
  return create(ConnectResponseSchema, {
    message: { case: 'purge', value: { sequence, purgeId, type: PurgeType.ALL, nonce: randomUUID() } },
  });
}

const welcomeFor = (nodeId: string): ConnectResponse =>
  create(ConnectResponseSchema, { message: { case: 'welcome', value: { nodeId, ...WELCOME } } });

/** Counts the acknowledgements of the round in flight. */
class Rounds {
  sequence = 0n;
  private waiting: { sequence: bigint; expected: number; count: number; resolve: () => void } | undefined;

  onRequest(request: ConnectRequest): void {
    const m = request.message;
    if (m.case !== 'ack' || !this.waiting || m.value.version !== this.waiting.sequence) return;
    if (++this.waiting.count === this.waiting.expected) this.waiting.resolve();
  }

  /** Runs one round: `push` sends purge `sequence` to every stream; resolves with publish → all-acked in ms. */
  async run(expected: number, push: (message: ConnectResponse) => void): Promise<number> {
    const sequence = ++this.sequence;
    let timer: NodeJS.Timeout | undefined;
    const started = performance.now();
    const acked = new Promise<void>((resolve, reject) => {
      this.waiting = { sequence, expected, count: 0, resolve };
      timer = setTimeout(() => reject(new Error(`round ${sequence}: ${this.waiting?.count} of ${expected} acks after ${ROUND_TIMEOUT_MS} ms`)), ROUND_TIMEOUT_MS);
    });
    push(purgeMessage(sequence));
    try {
      await acked;
    } finally {
      clearTimeout(timer);
      this.waiting = undefined;
    }
    return performance.now() - started;
  }
}

interface FloorServer {
  port: number;
  streams(): number;
  push(message: ConnectResponse): void;
}

/** Receives every ack with the node id its stream said Hello with (the durable floor's stored purges). */
type AckListener = (nodeId: string, request: ConnectRequest) => void;

async function startGrpcJs(rounds: Rounds, onAck?: AckListener): Promise<FloorServer> {
  const streams = new Set<grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>>();
  const server = new grpc.Server();
  const connect = (call: grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>) => {
    let nodeId = '';
    call.on('data', (request: ConnectRequest) => {
      if (request.message.case === 'hello') {
        nodeId = request.message.value.nodeId;
        streams.add(call);
        call.write(welcomeFor(nodeId));
      } else {
        rounds.onRequest(request);
        if (onAck && request.message.case === 'ack') onAck(nodeId, request);
      }
    });
    const gone = () => streams.delete(call);
    call.on('end', () => { gone(); call.end(); });
    call.on('error', gone);
    call.on('cancelled', gone);
  };
  server.addService(edgeControlService, { connect } as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))));
  return {
    port,
    streams: () => streams.size,
    push(message) {
      const bytes = encodeResponse(message); // once, the same bytes to every stream
      for (const call of streams) call.write(bytes);
    },
  };
}

/** One stream's queue of messages for its response generator. */
class Outbox {
  queue: ConnectResponse[] = [];
  closed = false;
  private wake: (() => void) | undefined;
  push(message: ConnectResponse): void {
    this.queue.push(message);
    this.wake?.();
  }
  close(): void {
    this.closed = true;
    this.wake?.();
  }
  async *drain(): AsyncGenerator<ConnectResponse> {
    while (!this.closed) {
      if (this.queue.length) yield this.queue.shift()!;
      else await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

async function startConnect(rounds: Rounds): Promise<FloorServer> {
  const streams = new Set<Outbox>();
  const handler = connectNodeAdapter({
    grpc: true, connect: false, grpcWeb: false,
    routes: (router) => router.service(EdgeControlService, {
      async *connect(requests: AsyncIterable<ConnectRequest>) {
        const outbox = new Outbox();
        void (async () => {
          try {
            for await (const request of requests) {
              if (request.message.case === 'hello') {
                streams.add(outbox);
                outbox.push(welcomeFor(request.message.value.nodeId));
              } else rounds.onRequest(request);
            }
          } catch {
            // the client went away
          } finally {
            outbox.close();
          }
        })();
        try {
          yield* outbox.drain();
        } finally {
          streams.delete(outbox);
        }
      },
    }),
  });
  const server = http2.createServer(handler);
  await new Promise<void>((resolve) => server.listen({ port: 0, host: '127.0.0.1', backlog: 2048 }, resolve));
  return {
    port: (server.address() as AddressInfo).port,
    streams: () => streams.size,
    push(message) {
      for (const outbox of streams) outbox.push(message);
    },
  };
}

const DURABLE_SCHEMA = `
  create table if not exists bench_floor_purge (
    id uuid primary key, sequence bigserial not null, status text not null,
    edge_nodes_total int not null, edge_nodes_completed int not null default 0,
    created_at timestamptz not null default now(), completed_at timestamptz);
  create table if not exists bench_floor_ack (
    purge_id uuid not null, node_id uuid not null, ok boolean not null, acked_at timestamptz not null,
    primary key (purge_id, node_id))`;

/**
 * The stored-purge floor: `POST /purge` → one insert, 202, the push to every stream; the last ack → one statement
 * storing the acks and completing the row. Statements go as simple queries with inlined literals (the ids are
 * UUIDs this process made, the node ids ones the agents sent and are checked here), one socket write each.
 */
interface Durable {
  httpPort: number;
  onAck: AckListener;
  /** What the stored purges left in the database, once the last one's acks are written. */
  stored(): Promise<{ purges: number; completed: number; acks: number }>;
}

async function startDurable(url: string, server: FloorServer): Promise<Durable> {
  // A pool, as the control plane has: the acks of one purge may still be written when the next purge comes.
  const db = new pg.Pool({ connectionString: url, max: 2 });
  await db.query(DURABLE_SCHEMA);
  // One floor process per N runs on the run's database: each counts its own purges.
  await db.query('truncate bench_floor_purge, bench_floor_ack');
  const open = new Map<string, { expected: number; nodes: string[] }>();
  let writing = Promise.resolve();
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const httpServer = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/purge') {
        res.writeHead(404).end();
        return;
      }
      const id = randomUUID();
      const expected = server.streams();
      db.query(`insert into bench_floor_purge (id, status, edge_nodes_total) values ('${id}', 'in_progress', ${expected}) returning sequence`).then(
        (result) => {
          const sequence = BigInt(result.rows[0].sequence);
          open.set(id, { expected, nodes: [] });
          const body = JSON.stringify({ id, sequence: Number(sequence), status: 'in_progress' });
          res.writeHead(202, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
          server.push(purgeMessage(sequence, id));
        },
        (error: Error) => res.writeHead(500).end(error.message),
      );
    });
  });
  await new Promise<void>((resolve) => httpServer.listen({ port: 0, host: '127.0.0.1' }, resolve));
  const onAck: AckListener = (nodeId, request) => {
    const m = request.message;
    if (m.case !== 'ack' || !uuid.test(nodeId)) return;
    const purge = open.get(m.value.id);
    if (!purge) return;
    purge.nodes.push(nodeId);
    if (purge.nodes.length < purge.expected) return;
    open.delete(m.value.id);
    writing = db.query(`with stored as (
        insert into bench_floor_ack (purge_id, node_id, ok, acked_at)
        select '${m.value.id}', unnest('{${purge.nodes.join(',')}}'::uuid[]), true, now() on conflict do nothing returning 1)
      update bench_floor_purge set status = 'completed', edge_nodes_completed = (select count(*) from stored), completed_at = now()
      where id = '${m.value.id}'`).then(() => {}, (error: Error) => { process.send!({ type: 'error', message: `storing acks: ${error.message}` }); });
  };
  const stored = async () => {
    await writing;
    const { rows } = await db.query(`select (select count(*)::int from bench_floor_purge) as purges,
      (select count(*)::int from bench_floor_purge where status = 'completed' and edge_nodes_completed = edge_nodes_total) as completed,
      (select count(*)::int from bench_floor_ack) as acks`);
    return rows[0] as { purges: number; completed: number; acks: number };
  };
  return { httpPort: (httpServer.address() as AddressInfo).port, onAck, stored };
}

const gc = (): void => (globalThis as { gc?: () => void }).gc?.();

async function measure(library: FloorLibrary, server: FloorServer, rounds: Rounds, n: number, count: number, warmup: number): Promise<Measured> {
  if (server.streams() !== n) throw new Error(`${server.streams()} streams connected, ${n} expected`);
  gc();
  const rssIdle = process.memoryUsage.rss();
  const heapIdle = process.memoryUsage().heapUsed;
  for (let i = 0; i < warmup; i++) await rounds.run(n, (m) => server.push(m));
  const latencies: number[] = [];
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < count; i++) latencies.push(await rounds.run(n, (m) => server.push(m)));
  const wallMs = performance.now() - started;
  const used = process.cpuUsage(cpu);
  const rssAfter = process.memoryUsage.rss();
  gc();
  return {
    library, streams: n, latencies, cpuMs: (used.user + used.system) / 1000, wallMs,
    rssIdle, rssAfter, rssPeak: process.resourceUsage().maxRSS * 1024, heapIdle, heapAfter: process.memoryUsage().heapUsed,
  };
}

async function main(library: FloorLibrary, durableUrl: string | undefined): Promise<void> {
  const rounds = new Rounds();
  let onAck: AckListener | undefined;
  const server = library === 'grpc-js' ? await startGrpcJs(rounds, (nodeId, request) => onAck?.(nodeId, request)) : await startConnect(rounds);
  let durable: Durable | undefined;
  if (durableUrl) {
    if (library !== 'grpc-js') throw new Error('--durable runs with grpc-js only');
    durable = await startDurable(durableUrl, server);
    onAck = durable.onAck;
  }
  process.on('message', (message: { type: string; n: number; rounds: number; warmup: number }) => {
    if (message.type === 'streams') process.send!({ type: 'streams', n: server.streams() });
    if (message.type === 'stored' && durable) {
      durable.stored().then(
        (counts) => process.send!({ type: 'stored', ...counts }),
        (error: Error) => process.send!({ type: 'error', message: error.message }),
      );
    }
    if (message.type === 'measure') {
      measure(library, server, rounds, message.n, message.rounds, message.warmup).then(
        (measured) => process.send!({ type: 'measured', ...measured }),
        (error: Error) => process.send!({ type: 'error', message: error.message }),
      );
    }
  });
  process.on('disconnect', () => process.exit(0));
  process.on('SIGTERM', () => process.exit(0)); // exits cleanly, so a --cpu-prof profile is written
  process.send!({ type: 'ready', port: server.port, httpPort: durable?.httpPort });
}

if (import.meta.main) {
  const library = process.argv[2];
  const durable = process.argv.indexOf('--durable');
  if ((library !== 'grpc-js' && library !== 'connect') || (durable !== -1 && !process.argv[durable + 1])) {
    throw new Error('usage: floor-server.ts grpc-js|connect [--durable <postgres url>]');
  }
  await main(library, durable === -1 ? undefined : process.argv[durable + 1]);
}
