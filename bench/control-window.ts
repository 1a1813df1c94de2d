// A push over the control stream to an agent far away: how long a message of
// a given size takes to arrive over @grpc/grpc-js with HTTP/2's default
// flow-control window (64 KiB) and with the window the edge agent grants
// (CONTROL_FLOW_CONTROL_WINDOW_BYTES, shared/src/proto/edge-control.ts).
// The distance is a proxy on loopback that hands every chunk on, either way,
// after half the round trip (this VM's kernel has no netem); the server is a
// grpc-js server with the EdgeControlService method shape writing one
// prepared message per request, as the control plane writes a push.
//
// Sizes: a 100-endpoint delta (126 KiB), a full configuration of 1,000 and of
// 10,000 endpoints (about 1.2 and 12 MiB, bench/control-channel.ts).
// Run: npm run bench:window -- [--rtt 20,50,100] [--rounds 3]
// Results: printed and added to bench/results/control-window.md (newest first).
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { CONTROL_FLOW_CONTROL_WINDOW_BYTES } from '../shared/src/proto/edge-control.ts';
import { listFlag, numberFlag } from './lib/cli.ts';
import { loadAverage, summarize, wallNow } from './lib/stats.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const RTTS = listFlag('rtt', '20,50,100').map(Number);
const ROUNDS = numberFlag('rounds', 3);
const SIZES = [
  { label: '100-endpoint delta', bytes: 126 * 1024 },
  { label: 'full, 1,000 endpoints', bytes: Math.round(1.22 * 1024 * 1024) },
  { label: 'full, 10,000 endpoints', bytes: Math.round(12.21 * 1024 * 1024) },
];
const WINDOWS = [
  { label: 'HTTP/2 default (64 KiB)', options: {} },
  { label: `agent's (${CONTROL_FLOW_CONTROL_WINDOW_BYTES / 1024 / 1024} MiB)`, options: { 'grpc-node.flow_control_window': CONTROL_FLOW_CONTROL_WINDOW_BYTES } },
];

const same = (x: Buffer) => x;
const method = {
  path: '/bench.Window/Push', requestStream: true, responseStream: true,
  requestSerialize: same, requestDeserialize: same, responseSerialize: same, responseDeserialize: same,
} satisfies grpc.MethodDefinition<Buffer, Buffer>;

/** The server: answers each request (4 bytes: the size wanted) with one message of that size. */
async function startServer(): Promise<{ port: number; stop(): void }> {
  const payloads = new Map(SIZES.map((s) => [s.bytes, Buffer.alloc(s.bytes, 7)]));
  const server = new grpc.Server({ 'grpc.max_send_message_length': -1 });
  server.addService({ push: method }, {
    push(call: grpc.ServerDuplexStream<Buffer, Buffer>) {
      // A size it has no message of (0: the stream's opening message) is answered with nothing.
      call.on('data', (request: Buffer) => {
        const payload = payloads.get(request.readUInt32BE(0));
        if (payload) call.write(payload);
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))));
  return { port, stop: () => server.forceShutdown() };
}

/** A TCP proxy that hands every chunk on, in order, after `delayMs` (half the round trip) in both directions. */
async function startDistance(target: number, delayMs: number): Promise<{ port: number; stop(): void }> {
  const sockets = new Set<net.Socket>();
  const proxy = net.createServer((near) => {
    const far = net.connect(target, '127.0.0.1');
    for (const s of [near, far]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    const relay = (from: net.Socket, to: net.Socket) => from.on('data', (chunk) => setTimeout(() => to.writable && to.write(chunk), delayMs));
    relay(near, far);
    relay(far, near);
    near.on('close', () => far.destroy());
    far.on('close', () => near.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return { port: (proxy.address() as net.AddressInfo).port, stop: () => { for (const s of sockets) s.destroy(); proxy.close(); } };
}

/** ms from the request to the whole message received, on a fresh connection (its window starts as the agent's would). */
async function receive(port: number, bytes: number, options: grpc.ChannelOptions): Promise<number> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': -1, 'grpc.use_local_subchannel_pool': 1, ...options,
  });
  try {
    await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (error) => (error ? reject(error) : resolve())));
    const call = client.makeBidiStreamRequest<Buffer, Buffer>(method.path, same, same);
    call.on('error', () => {});
    const request = Buffer.alloc(4);
    request.writeUInt32BE(bytes);
    // The stream is opened first (its headers), as the agent's stream is long open when a push comes.
    call.write(Buffer.alloc(4));
    await new Promise((r) => setTimeout(r, 50));
    const started = wallNow();
    const got = await new Promise<Buffer>((resolve) => {
      call.once('data', resolve);
      call.write(request);
    });
    const ms = wallNow() - started;
    if (got.length !== bytes) throw new Error(`received ${got.length} bytes, ${bytes} sent`);
    call.end();
    return ms;
  } finally {
    client.close();
  }
}

const loadBefore = loadAverage();
const server = await startServer();
const rows: string[] = [];
for (const rtt of RTTS) {
  const distance = await startDistance(server.port, rtt / 2);
  for (const size of SIZES) {
    const medians: number[] = [];
    for (const window of WINDOWS) {
      const times: number[] = [];
      for (let round = 0; round < ROUNDS; round++) times.push(await receive(distance.port, size.bytes, window.options));
      medians.push(summarize(times).p50);
    }
    const [plain, agent] = medians as [number, number];
    const row = `| ${rtt} | ${size.label} | ${(size.bytes / 1024).toFixed(0)} | ${plain.toFixed(0)} | ${agent.toFixed(0)} | ${(plain / agent).toFixed(1)}× |`;
    console.log(row);
    rows.push(row);
  }
  distance.stop();
}
server.stop();

const lines = [
  `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
  '',
  `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'CPU'}, Node ${process.version}; load average ${loadBefore} before, ${loadAverage()} after. `
    + `One message, request to whole message received, median of ${ROUNDS} rounds each on a fresh connection; the round trip is a loopback proxy's delay.`,
  '',
  `| round trip ms | push | KiB | ${WINDOWS[0]!.label}, ms | ${WINDOWS[1]!.label}, ms | faster |`,
  '|---:|---|---:|---:|---:|---:|',
  ...rows,
  '',
];
const results = path.join(here, 'results', 'control-window.md');
const previous = fs.existsSync(results) ? fs.readFileSync(results, 'utf8').replace(/^# .*\n\n/, '') : '';
fs.writeFileSync(results, `# A push to a distant agent by flow-control window (bench/control-window.ts, newest first)\n\n${lines.join('\n')}\n${previous}`);
