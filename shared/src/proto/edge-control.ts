// EdgeControlService.Connect for @grpc/grpc-js, on both ends: the control
// plane's server and the agent's client use this one definition, with the
// protobuf-es code generated from proto/edge/v1 doing the encoding. The server
// may write a ConnectResponse already encoded (a Uint8Array): a push that goes
// to many agents is encoded once and the same bytes are written to every
// stream.
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import type { ServiceDefinition } from '@grpc/grpc-js';
import {
  ConnectRequestSchema, ConnectResponseSchema, type ConnectRequest, type ConnectResponse,
} from '../../gen/edge/v1/control_pb.ts';

export const EDGE_CONTROL_CONNECT_PATH = '/edge.v1.EdgeControlService/Connect';

/**
 * The HTTP/2 flow-control window the agent grants the control plane, per stream and for the connection: how
 * many bytes of a push may be on their way before the agent's acknowledgement of receipt (WINDOW_UPDATE) comes
 * back. HTTP/2's default of 64 KiB caps a push at 64 KiB per round trip: a full configuration of 10,000
 * endpoints (about 12 MiB) took 10 s to reach an agent 50 ms away, and a 100-endpoint delta (126 KiB) three
 * round trips. 16 MiB holds that full configuration (bench/control-window.ts). The agent reads the stream as
 * it arrives, so the window bounds bytes in flight, not memory held.
 */
export const CONTROL_FLOW_CONTROL_WINDOW_BYTES = 16 * 1024 * 1024;

/** A response message, or its encoding shared by every stream it is written to. */
export type OutgoingResponse = ConnectResponse | Uint8Array;

export function encodeResponse(message: ConnectResponse): Uint8Array {
  return toBinary(ConnectResponseSchema, message);
}

const asBuffer = (bytes: Uint8Array): Buffer => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

export const edgeControlService = {
  connect: {
    path: EDGE_CONTROL_CONNECT_PATH,
    requestStream: true,
    responseStream: true,
    requestSerialize: (message: ConnectRequest): Buffer => asBuffer(toBinary(ConnectRequestSchema, message)),
    requestDeserialize: (bytes: Buffer): ConnectRequest => fromBinary(ConnectRequestSchema, bytes),
    responseSerialize: (message: OutgoingResponse): Buffer => asBuffer(message instanceof Uint8Array ? message : toBinary(ConnectResponseSchema, message)),
    responseDeserialize: (bytes: Buffer): ConnectResponse => fromBinary(ConnectResponseSchema, bytes),
    originalName: 'Connect',
  },
} satisfies ServiceDefinition;

export type EdgeControlServiceDefinition = typeof edgeControlService;
