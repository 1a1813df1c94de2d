// The EdgeAgent options an agent process builds from its configuration: the
// single process (main.ts), the primary of an agent with workers and each
// worker (workers/) start from the same settings.
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import pino from 'pino';
import type { EdgeAgentOptions } from './agent.ts';
import type { AgentConfig } from './config.ts';
import { StateKey } from './control/sealing.ts';
import { trustedProxy } from './policy/client-address.ts';

export function agentLogger(config: AgentConfig, base: Record<string, unknown> = {}): Logger {
  return pino({
    level: config.LOG_LEVEL,
    base: { service: 'edge-agent', region: config.REGION, ...base },
    // Secrets never reach the logs, whatever a caller passes.
    redact: ['token', 'agent_token', 'authorization', '*.authorization', 'headers.authorization', 'headers.cookie'],
  });
}

export function agentOptions(config: AgentConfig, logger: Logger): EdgeAgentOptions {
  return {
    dataDir: config.DATA_DIR,
    // The configuration kept in DATA_DIR is sealed with a key derived from the agent token, which is not stored beside it.
    // From a config file nothing is kept (the file is read at every start).
    persist: config.AGENT_TOKEN !== undefined,
    stateKey: config.AGENT_TOKEN === undefined ? null : StateKey.fromAgentToken(config.AGENT_TOKEN),
    memoryBytes: config.CACHE_MEMORY_BYTES,
    maxObjectBytes: config.CACHE_MAX_OBJECT_BYTES,
    sliceBytes: config.CACHE_SLICE_BYTES,
    sliceThresholdBytes: config.CACHE_SLICE_THRESHOLD_BYTES,
    region: config.REGION,
    defaultEndpointId: config.DEFAULT_ENDPOINT ?? null,
    logger,
    requestHeadersTimeoutMs: config.REQUEST_HEADERS_TIMEOUT_MS,
    requestTimeoutMs: config.REQUEST_TIMEOUT_MS,
    requestBodyIdleTimeoutMs: config.REQUEST_BODY_IDLE_TIMEOUT_MS,
    uploadConnectionsPerOrigin: config.ORIGIN_UPLOAD_CONNECTIONS,
    maxEndpoints: config.MAX_ENDPOINTS,
    trustedProxy: trustedProxy(config.TRUST_PROXY_HEADER, config.TRUSTED_PROXY_CIDRS),
    cacheWhenDisconnected: config.CACHE_WHEN_DISCONNECTED,
    nodeName: config.NODE_HOSTNAME ?? hostname(),
    logDrains: { bufferBytes: config.LOG_DRAIN_BUFFER_BYTES, flushIntervalMs: config.LOG_DRAIN_FLUSH_INTERVAL_MS, retryMaxMs: config.LOG_DRAIN_RETRY_MAX_MS },
    httpsPublicPort: config.HTTPS_PUBLIC_PORT,
  };
}
