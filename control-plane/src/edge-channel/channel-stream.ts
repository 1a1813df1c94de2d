// One agent's stream on this replica (DESIGN.md §7): who it is, where it
// stands in the session, the feeds' states for it, and the writes to it.
// Pushes are written as pre-encoded ConnectResponse bytes, shared by every
// stream they go to.
import { status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import type { ConnectRequest } from '../../../shared/gen/edge/v1/control_pb.ts';
import type { OutgoingResponse } from '../../../shared/src/proto/edge-control.ts';

export type AgentCall = ServerDuplexStream<ConnectRequest, OutgoingResponse>;

/**
 * Messages a stream may hold unsent (an agent that stops reading): beyond this
 * the stream is closed, and the agent catches up from the database when it
 * reconnects, instead of the control plane buffering without bound.
 */
export const MAX_UNSENT_MESSAGES = 20_000;

export class AgentStream {
  readonly call: AgentCall;
  readonly nodeId: string;
  readonly tokenId: string;
  readonly connectedAt: Date;
  readonly hostname: string;
  /** Each feed's state for this stream, in feed order (channel-feed.ts). */
  readonly feedStates: unknown[] = [];
  /** Set once Welcome is written: feeds may push from then on. */
  welcomed = false;
  closed = false;
  /** Taken out of the session layer's maps and the feeds' (ended, or replaced by a newer stream of its node). */
  forgotten = false;
  /** The agent reported draining (shutting down). */
  draining = false;

  constructor(init: { call: AgentCall; nodeId: string; tokenId: string; connectedAt: Date; hostname: string }) {
    this.call = init.call;
    this.nodeId = init.nodeId;
    this.tokenId = init.tokenId;
    this.connectedAt = init.connectedAt;
    this.hostname = init.hostname;
  }

  /** Writes one message; false when the stream is gone (or was closed because the agent stopped reading). */
  write(message: OutgoingResponse): boolean {
    if (this.closed) return false;
    if (this.call.writableLength >= MAX_UNSENT_MESSAGES) {
      this.end(GrpcStatus.RESOURCE_EXHAUSTED, 'the agent is not reading its stream; reconnect to catch up');
      return false;
    }
    this.call.write(message);
    return true;
  }

  /** Ends the stream with a status (the agent sees it and reconnects as its policy says). */
  end(code: GrpcStatus, details: string): void {
    if (this.closed) return;
    this.closed = true;
    endCall(this.call, code, details);
  }
}

/** Ends a call with a gRPC status (grpc-js turns an 'error' carrying code and details into the trailers). */
export function endCall(call: AgentCall, code: GrpcStatus, details: string): void {
  if (call.destroyed || call.writableEnded) return;
  call.emit('error', Object.assign(new Error(details), { code, details }));
}
