// Mapping between the agent's own shapes and the control channel's messages
// (proto/edge/v1/control.proto): pushes in, acknowledgements, heartbeats and
// traffic reports out. uint64 fields are bigint in protobuf-es.
import { create } from '@bufbuild/protobuf';
import {
  AckKind, AckSchema, ConnectRequestSchema, FailedUrlSchema, HeartbeatSchema, HelloSchema, LogDrainStateSchema, OriginHealthSchema, PurgeType,
  TrafficReportSchema, TrafficRollupSchema, TrafficSliceSchema, CountryCountSchema, UrlCountSchema, ShieldLatencySchema,
  type ConfigUpdate, type ConnectRequest, type Purge, type ShieldMap,
} from '../../../shared/gen/edge/v1/control_pb.ts';
import type { ShieldMapUpdate } from '../proxy/shield-directory.ts';
import type { HealthReport, PrefetchResult, PurgeCommand, PurgeType as AgentPurgeType } from './controlled-agent.ts';
import type { TrafficRollup } from '../metrics/traffic.ts';
import type { ConfigPush } from './resource-set.ts';

const big = (n: number): bigint => BigInt(Math.max(0, Math.trunc(n)));
const num = (n: bigint): number => (n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n));

function bigMap(m: Record<string, number>): Record<string, bigint> {
  const out: Record<string, bigint> = {};
  for (const [k, v] of Object.entries(m)) out[k] = big(v);
  return out;
}

export interface HelloFields {
  nodeId: string;
  hostname: string;
  region: string;
  agentVersion: string;
  configVersion: number;
  purgeSequence: number;
  /** The cache holds nothing: only open purges are sent, and Welcome's purge sequence is taken as applied. */
  cacheEmpty?: boolean;
  /** Origin shield: where other agents reach this one (empty: it does not shield), and how its region is shown. */
  shieldAddress?: string;
  regionName?: string;
  regionCountryCode?: string;
  regionCity?: string;
}

export function helloMessage(h: HelloFields): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: {
      case: 'hello',
      value: create(HelloSchema, {
        nodeId: h.nodeId, hostname: h.hostname, region: h.region, agentVersion: h.agentVersion,
        configVersion: big(h.configVersion), purgeSequence: big(h.purgeSequence), cacheEmpty: h.cacheEmpty ?? false,
        // This agent drops its cache when Welcome.reset_cache says it missed too many purges to replay.
        acceptsCacheReset: true,
        shieldAddress: h.shieldAddress ?? '', regionName: h.regionName ?? '', regionCountryCode: h.regionCountryCode ?? '', regionCity: h.regionCity ?? '',
      }),
    },
  });
}

export function shieldMapOf(m: ShieldMap): ShieldMapUpdate {
  return { regions: m.regions.map((r) => ({ region: r.region, nodes: r.nodes.map((n) => ({ nodeId: n.nodeId, address: n.address })) })), hopKeys: m.hopKeys };
}

export function configPushOf(u: ConfigUpdate): ConfigPush {
  return {
    version: num(u.version),
    full: u.full,
    baseVersion: num(u.baseVersion),
    resources: u.resources.map((r) => ({ key: r.key, version: num(r.version), body: r.body, sha256: r.sha256 })),
    removed: u.removed,
    digest: u.digest,
    resourceCount: u.resourceCount,
  };
}

const PURGE_TYPES: Partial<Record<number, AgentPurgeType>> = {
  [PurgeType.PATH]: 'path',
  [PurgeType.WILDCARD]: 'wildcard',
  [PurgeType.TAG]: 'tag',
  [PurgeType.ALL]: 'all',
};

/** The purge as EdgeAgent.applyPurge takes it; null when its type is unknown to this agent. */
export function purgeCommandOf(p: Purge): PurgeCommand | null {
  const type = PURGE_TYPES[p.type];
  if (type === undefined) return null;
  return { sequence: num(p.sequence), purge_id: p.purgeId, endpoint_id: p.endpointId, type, paths: p.paths, tags: p.tags, soft: p.soft };
}

export function configAck(version: number, nonce: string, error: string | null): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: { case: 'ack', value: create(AckSchema, { kind: AckKind.CONFIG, version: big(version), nonce, ok: error === null, error: error ?? '' }) },
  });
}

export function purgeAck(p: Purge, error: string | null): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: { case: 'ack', value: create(AckSchema, { kind: AckKind.PURGE, id: p.purgeId, version: p.sequence, nonce: p.nonce, ok: error === null, error: error ?? '' }) },
  });
}

export function prefetchAck(jobId: string, nonce: string, result: PrefetchResult, error: string | null): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: {
      case: 'ack',
      value: create(AckSchema, {
        kind: AckKind.PREFETCH, id: jobId, nonce, ok: error === null, error: error ?? '',
        fetched: result.fetched, failed: result.failed,
        failedUrls: result.failed_urls.map((f) => create(FailedUrlSchema, { url: f.url, reason: f.reason })),
      }),
    },
  });
}

export type NodeStatus = 'ok' | 'degraded' | 'draining';

export function heartbeatMessage(status: NodeStatus, configVersion: number, report: HealthReport): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: {
      case: 'heartbeat',
      value: create(HeartbeatSchema, {
        status,
        configVersion: big(configVersion),
        purgeSequence: big(report.purgeSequence),
        cacheObjects: big(report.cacheObjects),
        cacheBytes: big(report.cacheBytes),
        origins: report.origins.map((o) => create(OriginHealthSchema, {
          originId: o.originId, status: o.status, latencyMs: Math.max(0, Math.round(o.latencyMs)),
          lastSuccessAtMs: BigInt(o.lastSuccessAtMs), lastFailureAtMs: BigInt(o.lastFailureAtMs),
          failureReason: o.failureReason, consecutiveFailures: o.consecutiveFailures, checkedAtMs: BigInt(o.checkedAtMs),
        })),
        shieldLatencies: (report.shieldLatencies ?? []).map((l) => create(ShieldLatencySchema, { region: l.region, latencyMs: Math.min(60_000, Math.max(0, l.latencyMs)) })),
        unreachableShieldRegions: [...(report.shieldUnreachable ?? [])],
        logDrains: (report.logDrains ?? []).map((d) => create(LogDrainStateSchema, {
          drainId: d.drainId, status: d.status, lastError: d.lastError, recordsShipped: big(d.recordsShipped), recordsDropped: big(d.recordsDropped),
          batchesSent: big(d.batchesSent), bufferedBytes: big(d.bufferedBytes), lastDeliveredAtMs: BigInt(d.lastDeliveredAtMs),
        })),
      }),
    },
  });
}

export function trafficReportMessage(rollups: readonly TrafficRollup[], reportId = ''): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: {
      case: 'trafficReport',
      value: create(TrafficReportSchema, {
        reportId,
        rollups: rollups.map((r) => create(TrafficRollupSchema, {
          minuteStartMs: BigInt(r.minuteStartMs),
          endpointId: r.endpointId,
          requests: big(r.requests),
          // The proto has no 1xx class: interim answers are rare and counted in `requests` only.
          status2xx: big(r.statusClasses['2xx']),
          status3xx: big(r.statusClasses['3xx']),
          status4xx: big(r.statusClasses['4xx']),
          status5xx: big(r.statusClasses['5xx']),
          cacheStatuses: bigMap(r.cacheStatuses),
          bytesFromCache: big(r.bytesFromCache),
          bytesFromOrigin: big(r.bytesFromOrigin),
          responseTimeBuckets: r.responseTimeBuckets.map(big),
          responseTimeSumMs: r.responseTimeSumMs,
          topUrls: r.topUrls.map((u) => create(UrlCountSchema, {
            url: u.url, scheme: u.scheme, requests: big(u.requests), bytes: big(u.bytes), cacheHits: big(u.cacheHits), cacheStatuses: bigMap(u.cacheStatuses),
          })),
          cacheRuleHits: bigMap(r.cacheRuleHits),
          cacheRuleRequests: bigMap(r.cacheRuleRequests),
          slices: (r.slices ?? []).map((x) => create(TrafficSliceSchema, {
            originId: x.originId, cacheRuleId: x.cacheRuleId, requests: big(x.requests),
            status2xx: big(x.statusClasses['2xx']), status3xx: big(x.statusClasses['3xx']), status4xx: big(x.statusClasses['4xx']), status5xx: big(x.statusClasses['5xx']),
            cacheStatuses: bigMap(x.cacheStatuses), bytesFromCache: big(x.bytesFromCache), bytesFromOrigin: big(x.bytesFromOrigin),
            responseTimeBuckets: x.responseTimeBuckets.map(big), responseTimeSumMs: x.responseTimeSumMs,
          })),
          countries: (r.countries ?? []).map((c) => create(CountryCountSchema, { countryCode: c.countryCode, requests: big(c.requests), bytes: big(c.bytes), errors: big(c.errors) })),
        })),
      }),
    },
  });
}
