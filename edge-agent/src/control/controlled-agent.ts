// What the control-stream client drives: the agent as the
// control client sees it, an interface the agent (agent.ts) implements, so
// the client depends on this seam rather than on the agent process above it.
// The shapes that cross it (the health report, a refused configuration) live
// here too; purge commands and prefetch results are the cache's (cache/index.ts).
import type { DrainState } from '../logs/drains.ts';
import type { TrafficRollup } from '../metrics/traffic.ts';
import type { OriginHealthState } from '../proxy/health.ts';
import type { PrefetchResult, PurgeCommand, PurgeResult } from '../cache/index.ts';
import type { ConfigPush } from './resource-set.ts';
import type { ShieldLatency, ShieldMapUpdate } from '../proxy/shield-directory.ts';

export interface HealthReport {
  status: 'ok' | 'degraded';
  configVersion: number;
  purgeSequence: number;
  cacheObjects: number;
  cacheBytes: number;
  origins: OriginHealthState[];
  /** Each log drain's delivery (sent in heartbeats; absent: none). */
  logDrains?: DrainState[];
  /** The fastest connect time to each other region's shield nodes (absent: none measured). */
  shieldLatencies?: readonly ShieldLatency[];
  /** The other regions none of whose shield nodes answered the last probe (absent: none). */
  shieldUnreachable?: readonly string[];
}

/** The control plane refused the agent's token (revoked, expired or wrong): the gRPC status, what it said, since when. */
export interface TokenRefusal {
  code: string;
  reason: string;
  /** ISO 8601: the first refusal of this run of refusals. */
  since: string;
}

export type { PrefetchResult, PurgeCommand, PurgeResult, PurgeType } from '../cache/index.ts';

/** A configuration the agent will not serve; `message` is what the control client puts in its nack. */
export class ConfigRefusedError extends Error {
  override name = 'ConfigRefusedError';
}

export interface ConfigPushResult {
  version: number;
  /** Resources added, changed or removed. */
  changed: number;
  /** Endpoints compiled anew (the others were reused). */
  compiled: number;
}

export interface ControlledAgent {
  /** Nothing is cached (said in Hello as cache_empty). */
  readonly cacheEmpty: boolean;
  /** The configuration version to report (0 unless it came from a control plane). */
  readonly controlConfigVersion: number;
  readonly appliedPurgeSequence: number;
  /**
   * Applies a push (full or delta); throws (or rejects with) ConfigRefusedError and changes nothing when it cannot.
   * A promise when it is applied in several processes (workers): the ack waits for it.
   */
  applyConfigPush(push: ConfigPush): ConfigPushResult | Promise<ConfigPushResult>;
  /** Every purge up to `sequence` is moot (an empty cache, or `reset`: the cache is dropped). */
  startFromPurge(sequence: number, reset?: boolean): void;
  /** Welcome's purge sequence: behind it, nothing is served from the cache until the missed purges are applied. */
  beginPurgeCatchUp(target: number): boolean;
  /** A purge the agent cannot apply, recorded as seen. */
  skipPurge(sequence: number, reason: string): void;
  /** Applies one purge (a promise when applied in several processes: the ack waits for every one). */
  applyPurge(cmd: PurgeCommand): PurgeResult | Promise<PurgeResult>;
  prefetch(endpointId: string, urls: readonly string[]): Promise<PrefetchResult>;
  /** Cut off from the control plane for longer than the client's bound (true), or connected again (false). */
  controlPlaneLost(lost: boolean): void;
  /** The control plane refuses the agent's token (a refusal), or welcomed a stream again (null). */
  controlPlaneRefused(refusal: TokenRefusal | null): void;
  healthReport(): HealthReport;
  /** The shield map the control plane sent (each region's shield nodes, the hop keys). */
  applyShieldMap(map: ShieldMapUpdate): void;
  takeTrafficRollups(topN?: number): TrafficRollup[];
}
