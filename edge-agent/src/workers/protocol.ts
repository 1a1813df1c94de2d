// The messages between an agent's primary process and its data-plane workers
// (node:cluster IPC with the "advanced" serialisation, so pushes carry their
// bodies as bytes). Requests carry an id their reply repeats.
import type { ConfigPush } from '../control/resource-set.ts';
import type { PrefetchResult, PurgeCommand, ConfigPushResult } from '../control/controlled-agent.ts';
import type { DrainState } from '../logs/drains.ts';
import type { TrafficRollup } from '../metrics/traffic.ts';
import type { ShieldMapUpdate } from '../proxy/shield-directory.ts';
import type { CertificatePair } from '../tls/certificates.ts';
import type { FillLockMessage } from './fill-locks.ts';

export interface PurgeState {
  purgeSequence: number;
  catchUpTarget: number;
  cutOff: boolean;
}

/** Primary → worker. */
export type ToWorker =
  /** Before it listens: the configuration in force (null: none yet), the purge state, the default certificate. */
  | {
    t: 'init'; id: number; push: ConfigPush | null; purge: PurgeState; certificate: CertificatePair | null; ports: { http: number; https: number | null };
    ticketKeys: Buffer; shield: ShieldMapUpdate;
    /** The agent's IP-rule challenge secret: a cookie one worker set passes at every worker. */
    challengeSecret: Buffer;
  }
  | { t: 'shield'; map: ShieldMapUpdate }
  | { t: 'prepare'; id: number; push: ConfigPush }
  | { t: 'commit'; id: number }
  | { t: 'abort'; id: number }
  | { t: 'purge'; id: number; cmd: PurgeCommand }
  | { t: 'prefetch'; id: number; endpointId: string; urls: readonly string[] }
  | { t: 'metrics'; id: number }
  | { t: 'startFromPurge'; sequence: number; reset: boolean }
  | { t: 'catchUp'; target: number }
  | { t: 'skipPurge'; sequence: number; reason: string }
  | { t: 'cutOff'; lost: boolean }
  | { t: 'certificate'; certificate: CertificatePair | null }
  /** The session ticket keys rotated: every worker's TLS servers take the new ones. */
  | { t: 'ticketKeys'; keys: Buffer }
  /** Stop: close the listeners, let requests under way finish (up to timeoutMs), exit. */
  | { t: 'drain'; timeoutMs: number }
  /** A fill lock's answer (fill-locks.ts): lead the fill of key, or follow the one that ended. */
  | { t: 'fillTurn'; ticket: number; key: string; lead: boolean };

/** Worker → primary. */
export type FromWorker =
  | { t: 'reply'; id: number; ok: true; value?: unknown }
  | { t: 'reply'; id: number; ok: false; error: string }
  /**
   * Sent every second: its cache (its memory tier's objects and bytes, and what the node tier shared by every
   * worker holds: 0 without one), its log drains' delivery, and (every fifth time) its traffic since the last.
   */
  | { t: 'stats'; cacheObjects: number; cacheBytes: number; nodeObjects: number; nodeBytes: number; drains: DrainState[]; rollups: TrafficRollup[] }
  | FillLockMessage;

export interface ListeningPorts {
  http: number;
  https: number | null;
}

export type InitReply = ListeningPorts;
export type PrepareReply = null;
export type CommitReply = ConfigPushResult;
export type PurgeReply = { applied: boolean; purged: number };
export type PrefetchReply = PrefetchResult;
