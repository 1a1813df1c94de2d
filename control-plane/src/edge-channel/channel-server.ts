// The gRPC server of the control channel (DESIGN.md §7), and its composition:
// the session layer (channel-hub.ts) with its feeds in the order they open on
// a stream (configuration, purges, prefetch, origin health, traffic reports)
// and the coalesced writer they share. EdgeControlService
// on GRPC_PORT through @grpc/grpc-js (pre-encoded pushes, node streams rather
// than async iterators), plus grpc.health.v1. Plaintext HTTP/2 (h2c) by
// default, TLS when GRPC_TLS_CERT_FILE and GRPC_TLS_KEY_FILE are set. The TCP
// listener is our own (a large accept backlog, so a thousand agents
// reconnecting at once are not refused) and hands each connection to grpc-js.
// Keepalive pings notice a dead agent's connection. GRPC_PORT=0 takes a free
// port: the bound one is in services.edgeChannel and the log line.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { edgeControlService } from '../../../shared/src/proto/edge-control.ts';
import type { HealthServices } from '../health/index.ts';
import type { CdnServices } from '../cdn/index.ts';
import { ConfigFeed } from './channel-config.ts';
import { ChannelContext } from './channel-feed.ts';
import { ChannelMetrics } from './channel-metrics.ts';
import { ChannelHub } from './channel-hub.ts';
import { LogDrainFeed } from './channel-log-drains.ts';
import { OriginHealthFeed } from './channel-origin-health.ts';
import { PrefetchFeed } from './channel-prefetch.ts';
import { PurgeFeed } from './channel-purge-feed.ts';
import { SHIELD_HOP_PURPOSE, ShieldFeed } from './channel-shield.ts';
import type { AgentCall } from './channel-stream.ts';
import { TrafficFeed } from './channel-traffic.ts';
import type { AnalyticsServices } from '../cdn-analytics/index.ts';
import { ChannelWriter } from './channel-writer.ts';
import { onlineNodeCount, originHealthReading, propagation } from './nodes-service.ts';
import type { EdgeChannel, EdgeChannelServices } from './services.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';

/** Pending connections the kernel queues while the process accepts (Node's default is 511). */
const LISTEN_BACKLOG = 4_096;
const SERVICE_NAME = 'edge.v1.EdgeControlService';

const SERVER_OPTIONS: grpc.ServerOptions = {
  // A ping every 20 s on every connection; one unanswered for 10 s closes it (and the node goes offline).
  'grpc.keepalive_time_ms': 20_000,
  'grpc.keepalive_timeout_ms': 10_000,
  // Agents' messages are small (acks, heartbeats, traffic rollups); pushes may be large (a full configuration).
  'grpc.max_receive_message_length': 4 * 1024 * 1024,
  'grpc.max_send_message_length': -1,
};

export interface ChannelStart {
  services: Pick<EdgeChannelServices, 'edgeFleet' | 'edgeChannel'> & Pick<HealthServices, 'edgeConfigHealth'> & Pick<CdnServices, 'cdnOriginHealth' | 'cdnPurgeTargets' | 'cdnShieldRegions'>;
  close: () => Promise<void>;
  /** Registers the channel's metrics on the control plane's /metrics registry. */
  metrics: (registry: Registry) => void;
}

function credentials(certFile: string | undefined, keyFile: string | undefined): grpc.ServerCredentials {
  if (!certFile || !keyFile) return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(null, [{ cert_chain: readFileSync(certFile), private_key: readFileSync(keyFile) }], false);
}

/** The session layer with its feeds and writer. */
function channelHub(services: EdgeChannelServices, log: Logger, em: () => EntityManager): { hub: ChannelHub; metrics: ChannelMetrics } {
  const replicaId = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  let hub: ChannelHub | null = null;
  const metrics = new ChannelMetrics(() => hub?.streamCount ?? 0);
  const context = new ChannelContext({ em, clock: services.clock, log, writer: new ChannelWriter({ em, clock: services.clock, log, replicaId }), metrics });
  // The seams are read when used: the services that provide them may start after the channel, and tests replace them.
  const source = () => (services as Partial<EdgeChannelServices>).edgeConfig;
  const feeds = [new ConfigFeed(context, source), new PurgeFeed(context, { timeoutMs: services.config.EDGE_PURGE_TIMEOUT_MS }), new PrefetchFeed(context, source), new OriginHealthFeed(context), new LogDrainFeed(context),
    new TrafficFeed(context, () => (services as Partial<EdgeChannelServices & AnalyticsServices>).trafficRollups, services.config.EDGE_TRAFFIC_REPORT_INTERVAL_MS),
    new ShieldFeed(context, services.deriveKey(SHIELD_HOP_PURPOSE))];
  hub = new ChannelHub({
    context, store: services.store, config: services.config, feeds, replicaId,
    tokens: () => (services as Partial<EdgeChannelServices>).edgeAgentTokens,
  });
  return { hub, metrics };
}

export async function startChannel(services: EdgeChannelServices): Promise<ChannelStart> {
  const { config } = services;
  const log = services.log.child({ component: 'edge-channel' });
  const em = () => services.db.orm.em.fork() as EntityManager;
  const { hub, metrics } = channelHub(services, log, em);
  hub.start();

  const server = new grpc.Server(SERVER_OPTIONS);
  server.addService(edgeControlService, { connect: (call: AgentCall) => hub.handle(call) });
  const health = new HealthImplementation({ '': 'SERVING', [SERVICE_NAME]: 'SERVING' });
  health.addToServer(server);
  const tls = Boolean(config.GRPC_TLS_CERT_FILE && config.GRPC_TLS_KEY_FILE);
  const injector = server.createConnectionInjector(credentials(config.GRPC_TLS_CERT_FILE, config.GRPC_TLS_KEY_FILE));
  const listener = net.createServer({ noDelay: true }, (socket) => injector.injectConnection(socket));
  try {
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen({ port: config.GRPC_PORT, host: config.HOST, backlog: LISTEN_BACKLOG }, () => {
        listener.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    await hub.close();
    server.forceShutdown();
    throw new Error(`The edge control channel cannot listen on ${config.HOST}:${config.GRPC_PORT} (GRPC_PORT): ${(error as Error).message}`);
  }
  listener.on('error', (error) => log.error({ err: error }, 'edge control channel listener error'));
  const port = (listener.address() as net.AddressInfo).port;
  log.info({ port, host: config.HOST, tls }, 'edge control channel listening');

  let closing = false;
  const channel: EdgeChannel = { port, tls, replicaId: hub.replicaId, hub };
  return {
    services: {
      edgeChannel: channel,
      edgeFleet: { propagation: (versionNumber) => propagation(em(), versionNumber) },
      edgeConfigHealth: async () => ({ status: listener.listening && !closing ? 'ok' as const : 'degraded' as const, latency_ms: null }),
      cdnOriginHealth: (originId) => originHealthReading(em(), originId),
      // A purge goes to every node online when it is stored (nodes connecting later catch up by sequence).
      cdnPurgeTargets: onlineNodeCount,
      // The shield regions are the regions of edge nodes willing to shield (any status: a region whose nodes are all down is still one).
      cdnShieldRegions: async () => (await em().execute<{ region: string }[]>(
        `select distinct region from cdn_edge_node where shield_address is not null order by region`,
      )).map((r) => r.region),
    },
    metrics: (registry) => metrics.register(registry),
    async close() {
      closing = true;
      health.setStatus('', 'NOT_SERVING');
      health.setStatus(SERVICE_NAME, 'NOT_SERVING');
      listener.close();
      // Streams end with UNAVAILABLE (agents go to another replica) and what they acknowledged is written.
      await hub.close();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, config.SHUTDOWN_TIMEOUT_MS);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}
