// The generated edge.v1 code works on both ends of a real gRPC (h2c) bidi
// stream: a Connect-node server as the control plane runs it, and a client as
// the agent uses it. The stream's behaviour itself belongs to the edge channel.
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { connectNodeAdapter, createGrpcTransport } from '@connectrpc/connect-node';
import {
  ConnectRequestSchema, ConnectResponseSchema, EdgeControlService, PurgeType, type ConnectRequest,
} from '../../gen/edge/v1/control_pb.ts';

t.test('messages round-trip through the binary encoding, int64 as bigint', async (t) => {
  const message = create(ConnectRequestSchema, {
    message: { case: 'hello', value: { nodeId: 'n1', region: 'eu', configVersion: 42n, purgeSequence: 7n } },
  });
  const back = fromBinary(ConnectRequestSchema, toBinary(ConnectRequestSchema, message));
  t.equal(back.message.case, 'hello');
  t.equal(back.message.case === 'hello' && back.message.value.configVersion, 42n);
});

t.test('a bidi stream between a Connect server and a gRPC client', async (t) => {
  const handler = connectNodeAdapter({
    grpc: true, connect: false, grpcWeb: false,
    routes: (router) => router.service(EdgeControlService, {
      async *connect(requests: AsyncIterable<ConnectRequest>) {
        for await (const request of requests) {
          if (request.message.case === 'hello') {
            yield create(ConnectResponseSchema, { message: { case: 'welcome', value: { nodeId: request.message.value.nodeId, heartbeatIntervalMs: 5000 } } });
            yield create(ConnectResponseSchema, { message: { case: 'purge', value: { sequence: 1n, purgeId: 'p1', type: PurgeType.TAG, tags: ['video'] } } });
          }
          if (request.message.case === 'ack') return;
        }
      },
    }),
  });
  const server = http2.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const transport = createGrpcTransport({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  const client = createClient(EdgeControlService, transport);

  const outbox: ConnectRequest[] = [create(ConnectRequestSchema, { message: { case: 'hello', value: { nodeId: 'agent-1' } } })];
  let wake: (() => void) | undefined;
  async function* requests() {
    for (;;) {
      while (outbox.length) {
        const next = outbox.shift()!;
        yield next;
        if (next.message.case === 'ack') return;
      }
      await new Promise<void>((resolve) => (wake = resolve));
    }
  }
  const received: string[] = [];
  for await (const response of client.connect(requests())) {
    received.push(response.message.case ?? 'none');
    if (response.message.case === 'purge') {
      outbox.push(create(ConnectRequestSchema, { message: { case: 'ack', value: { id: response.message.value.purgeId, ok: true } } }));
      wake?.();
    }
  }
  t.same(received, ['welcome', 'purge']);
});
