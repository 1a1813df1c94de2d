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
// Run as a child with an IPC channel: node --expose-gc bench/lib/floor-server.ts grpc-js|connect
//   → {type: 'ready', port}
//   ← {type: 'measure', n, rounds, warmup}  → {type: 'measured', ...Measured} or {type: 'error', message}
//   ← {type: 'streams'}                     → {type: 'streams', n}
import { randomUUID } from 'node:crypto';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import * as grpc from '@grpc/grpc-js';
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
export function purgeMessage(sequence: bigint): ConnectResponse {
  return create(ConnectResponseSchema, {
    message: { case: 'purge', value: { sequence, purgeId: randomUUID(), type: PurgeType.ALL, nonce: randomUUID() } },
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

async function startGrpcJs(rounds: Rounds): Promise<FloorServer> {
  const streams = new Set<grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>>();
  const server = new grpc.Server();
  const connect = (call: grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>) => {
    call.on('data', (request: ConnectRequest) => {
      if (request.message.case === 'hello') {
        streams.add(call);
        call.write(welcomeFor(request.message.value.nodeId));
      } else rounds.onRequest(request);
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

async function main(library: FloorLibrary): Promise<void> {
  const rounds = new Rounds();
  const server = library === 'grpc-js' ? await startGrpcJs(rounds) : await startConnect(rounds);
  process.on('message', (message: { type: string; n: number; rounds: number; warmup: number }) => {
    if (message.type === 'streams') process.send!({ type: 'streams', n: server.streams() });
    if (message.type === 'measure') {
      measure(library, server, rounds, message.n, message.rounds, message.warmup).then(
        (measured) => process.send!({ type: 'measured', ...measured }),
        (error: Error) => process.send!({ type: 'error', message: error.message }),
      );
    }
  });
  process.on('disconnect', () => process.exit(0));
  process.on('SIGTERM', () => process.exit(0)); // exits cleanly, so a --cpu-prof profile is written
  process.send!({ type: 'ready', port: server.port });
}

if (import.meta.main) {
  const library = process.argv[2];
  if (library !== 'grpc-js' && library !== 'connect') throw new Error('usage: floor-server.ts grpc-js|connect');
  await main(library);
}
