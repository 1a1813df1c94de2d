// The simulated agents of the control-channel benchmark answer pushes as a
// real agent would: configuration applied all-or-nothing (full or delta on the
// held base, bodies checked against their SHA-256 and parsed, the digest
// checked) and acked, or nacked keeping the previous one; purges and prefetch
// jobs acked. And the process: N streams on N connections, each ack reported.
import { fork } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { configDigest, encodeResource, sha256Hex } from '../../shared/src/config/resources.ts';
import {
  AckKind, ConnectResponseSchema, PurgeType, type ConnectRequest, type ConnectResponse,
} from '../../shared/gen/edge/v1/control_pb.ts';
import { edgeControlService, encodeResponse, type OutgoingResponse } from '../../shared/src/proto/edge-control.ts';
import { eventually } from '../../test/support/eventually.ts';
import { answer, createAgentState, SharedPushes, type AgentState } from './sim-agents.ts';

const here = path.dirname(fileURLToPath(import.meta.url));

const endpoint = (id: string, name: string) => encodeResource('endpoint', { id, name } as { id: string });
type Resource = ReturnType<typeof endpoint>;

function configPush(version: bigint, resources: Resource[], options: { full?: boolean; base?: bigint; removed?: string[]; whole: Resource[] }): ConnectResponse {
  return create(ConnectResponseSchema, {
    message: {
      case: 'configUpdate',
      value: {
        version, nonce: `n${version}`, full: options.full ?? false, baseVersion: options.base ?? 0n, removed: options.removed ?? [],
        resources: resources.map((r) => ({ key: r.key, version, body: r.body, sha256: r.sha256 })),
        digest: configDigest(options.whole.map((r) => [r.key, r.sha256])), resourceCount: options.whole.length,
      },
    },
  });
}

const ackOf = (reply: ConnectRequest | undefined) => {
  if (reply?.message.case !== 'ack') throw new Error(`expected an ack, got ${reply?.message.case}`);
  return reply.message.value;
};

const snapshotOf = (state: AgentState) => ({ version: state.configVersion, resources: [...state.resources], digest: state.digest.hex() });

t.test('a Welcome is not answered; it sets the heartbeat interval', async (t) => {
  const state = createAgentState();
  t.equal(answer(state, create(ConnectResponseSchema, { message: { case: 'welcome', value: { nodeId: state.nodeId, heartbeatIntervalMs: 5000 } } })), undefined);
  t.equal(state.heartbeatIntervalMs, 5000);
});

t.test('configuration: a full push, then a delta on it, acked with version and nonce', async (t) => {
  const state = createAgentState();
  const [a, b, c] = [endpoint('a', 'one'), endpoint('b', 'two'), endpoint('c', 'three')];
  const full = ackOf(answer(state, configPush(3n, [a, b], { full: true, whole: [a, b] })));
  t.match(full, { kind: AckKind.CONFIG, version: 3n, nonce: 'n3', ok: true, error: '' });
  t.equal(state.configVersion, 3n);
  t.same([...state.resources.keys()].sort(), ['endpoint/a', 'endpoint/b']);

  const b2 = endpoint('b', 'two, changed');
  const delta = ackOf(answer(state, configPush(4n, [b2, c], { base: 3n, removed: ['endpoint/a'], whole: [b2, c] })));
  t.match(delta, { kind: AckKind.CONFIG, version: 4n, nonce: 'n4', ok: true });
  t.equal(state.configVersion, 4n);
  t.equal(state.resources.get('endpoint/b'), b2.sha256);
  t.notOk(state.resources.has('endpoint/a'));
  t.equal(state.digest.hex(), configDigest([[b2.key, b2.sha256], [c.key, c.sha256]]));
});

t.test('configuration that cannot be applied is nacked with the reason, and the previous one is kept', async (t) => {
  const state = createAgentState();
  const a = endpoint('a', 'one');
  answer(state, configPush(1n, [a], { full: true, whole: [a] }));
  const held = snapshotOf(state);
  const b = endpoint('b', 'two');

  const wrongBase = ackOf(answer(state, configPush(2n, [b], { base: 7n, whole: [a, b] })));
  t.match(wrongBase, { kind: AckKind.CONFIG, version: 2n, nonce: 'n2', ok: false, error: /^base_mismatch: delta on base version 7/ });

  const badDigest = configPush(2n, [b], { base: 1n, whole: [b] }); // digest and count of a configuration without `a`
  t.match(ackOf(answer(state, badDigest)), { ok: false, error: /^base_mismatch: (holds 2 resources|configuration digest)/ });

  const tampered = configPush(2n, [b], { base: 1n, whole: [a, b] });
  if (tampered.message.case === 'configUpdate') tampered.message.value.resources[0]!.body = new TextEncoder().encode('{"id":"b","name":"other"}');
  t.match(ackOf(answer(state, tampered)), { ok: false, error: /does not match its sha256/ });

  const body = new TextEncoder().encode('{not json');
  const notJson = { key: 'endpoint/x', body, sha256: sha256Hex(body) };
  t.match(ackOf(answer(state, configPush(2n, [notJson], { base: 1n, whole: [a, notJson] }))), { ok: false, error: /not valid UTF-8 JSON/ });

  t.same(snapshotOf(state), held, 'the configuration held is unchanged after every nack');
});

t.test('purges are acked with their id, sequence and nonce; the applied sequence only grows', async (t) => {
  const state = createAgentState();
  const purge = (sequence: bigint) => create(ConnectResponseSchema, { message: { case: 'purge', value: { sequence, purgeId: `p${sequence}`, type: PurgeType.ALL, nonce: `x${sequence}` } } });
  t.match(ackOf(answer(state, purge(5n))), { kind: AckKind.PURGE, id: 'p5', version: 5n, nonce: 'x5', ok: true });
  t.match(ackOf(answer(state, purge(4n))), { kind: AckKind.PURGE, id: 'p4', version: 4n, ok: true }, 'a replayed purge is acked again');
  t.equal(state.purgeSequence, 5n);
});

t.test('a prefetch job is acked with its URLs as fetched', async (t) => {
  const state = createAgentState();
  const job = create(ConnectResponseSchema, { message: { case: 'prefetchJob', value: { jobId: 'j1', urls: ['https://a/1', 'https://a/2'], nonce: 'q' } } });
  t.match(ackOf(answer(state, job)), { kind: AckKind.PREFETCH, id: 'j1', nonce: 'q', ok: true, fetched: 2, failed: 0 });
});

t.test('the process: N streams on N connections with the token, every push acked and reported once all N answered', async (t) => {
  const N = 3;
  const peers = new Set<string>();
  const tokens: string[] = [];
  const streams: grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>[] = [];
  const acks: ConnectRequest[] = [];
  const server = new grpc.Server();
  const connect = (call: grpc.ServerDuplexStream<ConnectRequest, OutgoingResponse>) => {
    tokens.push(String(call.metadata.get('authorization')[0]));
    peers.add(call.getPeer());
    call.on('data', (request: ConnectRequest) => {
      if (request.message.case === 'hello') {
        streams.push(call);
        call.write(create(ConnectResponseSchema, { message: { case: 'welcome', value: { nodeId: request.message.value.nodeId } } }));
      } else if (request.message.case === 'ack') acks.push(request);
    });
    call.on('end', () => call.end());
    call.on('error', () => {});
  };
  server.addService(edgeControlService, { connect } as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))));
  t.teardown(() => server.forceShutdown());

  const child = fork(path.join(here, 'sim-agents.ts'), ['--target', `127.0.0.1:${port}`, '--n', String(N), '--token', 'agt_test', '--report-acks'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  t.teardown(() => { if (child.exitCode === null) child.kill(); });
  const messages: Array<Record<string, any>> = [];
  const next = (type: string) => new Promise<Record<string, any>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} message within 20 s`)), 20_000);
    const check = () => {
      const i = messages.findIndex((m) => m.type === type || m.type === 'error');
      if (i === -1) return;
      child.off('message', onMessage);
      clearTimeout(timer);
      resolve(messages.splice(i, 1)[0]!);
    };
    const onMessage = (m: Record<string, any>) => { messages.push(m); check(); };
    child.on('message', onMessage);
    check();
  });

  t.match(await next('connected'), { type: 'connected', n: N });
  t.equal(peers.size, N, 'each agent on its own connection (distinct client ports)');
  t.same(tokens, Array(N).fill('Bearer agt_test'));

  const bytes = encodeResponse(create(ConnectResponseSchema, { message: { case: 'purge', value: { sequence: 1n, purgeId: 'p1', type: PurgeType.ALL, nonce: 'n' } } }));
  for (const call of streams) call.write(bytes);
  const acked = await next('acked');
  t.match(acked, { kind: 'purge', key: 'p1', count: N, nacks: 0, bytes: N * bytes.length, maxBytes: bytes.length });
  t.ok(acked.lastAckAt >= acked.firstReceivedAt, 'times on one wall clock');
  await eventually(() => acks.length === N, 'the server read all acks');
  t.ok(acks.every((a) => a.message.case === 'ack' && a.message.value.id === 'p1' && a.message.value.version === 1n));

  child.send({ type: 'close' });
  await new Promise((resolve) => child.once('exit', resolve));
});

t.test('SharedPushes: identical bytes on the same base are verified once and give every agent the same outcome', async (t) => {
  const pushes = new SharedPushes();
  const a = endpoint('a', 'one'.repeat(400));
  const b = endpoint('b', 'two'.repeat(400));
  const full = encodeResponse(configPush(1n, [a, b], { full: true, whole: [a, b] }));
  const first = createAgentState();
  const second = createAgentState();
  const m1 = pushes.decode(Buffer.from(full));
  const m2 = pushes.decode(Buffer.from(full));
  t.equal(m1, m2, 'the second copy is not decoded again');
  t.match(ackOf(pushes.answer(first, m1)), { ok: true, version: 1n });
  t.match(ackOf(pushes.answer(second, m2)), { ok: true, version: 1n });
  t.equal(second.configVersion, 1n);
  t.equal(second.digest.hex(), first.digest.hex());
  t.same([...second.resources.keys()].sort(), ['endpoint/a', 'endpoint/b']);
  // Another base (an agent holding nothing) gets its own verdict on a delta: a base mismatch.
  const b2 = endpoint('b', 'three'.repeat(400));
  const delta = encodeResponse(configPush(2n, [b2], { base: 1n, whole: [a, b2] }));
  const fresh = createAgentState();
  t.match(ackOf(pushes.answer(first, pushes.decode(Buffer.from(delta)))), { ok: true, version: 2n });
  t.match(ackOf(pushes.answer(fresh, pushes.decode(Buffer.from(delta)))), { ok: false, error: /^base_mismatch: / });
  t.equal(first.configVersion, 2n);
  t.equal(second.configVersion, 1n, 'an agent that has not received it is unchanged');
  t.match(ackOf(pushes.answer(second, pushes.decode(Buffer.from(delta)))), { ok: true, version: 2n });
  t.equal(second.digest.hex(), first.digest.hex());
});
