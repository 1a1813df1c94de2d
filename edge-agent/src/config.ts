// Agent process configuration: every setting is an environment variable and
// also a CLI flag (--http-port 8090 or --http-port=8090 for HTTP_PORT). A bad
// value stops the process with one line naming the variable (exit code 1).
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { shieldAddressProblem } from '../../shared/src/edge/shield-address.ts';
import { trustedProxy } from './policy/client-address.ts';

const MiB = 1024 * 1024;

const port = z.coerce.number().int().min(0).max(65535);
const bytes = z.string().trim().regex(/^\d+\s*([kKmMgG]i?[bB]?)?$/, 'a byte count such as 268435456, 256MiB or 1GiB').transform(parseBytes);

/**
 * Every setting, its parsing and its documentation: `.describe()` (or `.meta()` with `docDefault` for a default that
 * depends on the machine or is computed at start, `docType` where the parser's own shape says too little) is what
 * docs/configuration.md prints (`npm run docs:config`).
 */
export const agentConfigSchema = z.object({
  HTTP_PORT: port.default(8090).describe('the plain-HTTP listener for viewers'),
  WORKERS: z.coerce.number().int().min(1).max(256).default(availableParallelism())
    .meta({
      description: 'data-plane worker processes sharing the listening ports, each with `CACHE_MEMORY_BYTES / WORKERS` of memory cache in front of the node tier (`CACHE_DISK_BYTES`); configuration and purges reach every worker before they are acknowledged; a worker that dies is replaced while the others serve; 1 runs a single process',
      docDefault: 'one per core',
    }),
  HTTPS_PORT: z.string().trim().regex(/^(off|\d{1,5})$/, 'a port number (0..65535) or off')
    .transform((v) => (v === 'off' ? 'off' as const : Number(v))).refine((v) => v === 'off' || v <= 65535, 'a port number (0..65535) or off').default(8443)
    .meta({ description: 'the HTTPS listener, certificates chosen by SNI (see docs/guides/https.md); `off`: none', docType: 'port 0..65535, or `off`' }),
  TLS_CERT_FILE: z.string().min(1).optional()
    .meta({ description: 'the default certificate, a PEM chain (leaf first), with `TLS_KEY_FILE` (both or neither): it serves every endpoint\'s CDN hostname it covers (the wildcard `*.CDN_DOMAIN`) and connections without SNI; custom domains come with their own. Read again on SIGHUP and when the files change (checked every 30 s)', docType: 'path of a PEM file' }),
  TLS_KEY_FILE: z.string().min(1).optional()
    .meta({ description: 'the private key of `TLS_CERT_FILE` (both or neither)', docType: 'path of a PEM file' }),
  HTTPS_PUBLIC_PORT: z.coerce.number().int().min(1).max(65535).optional()
    .meta({ description: 'the HTTPS port viewers reach when a port mapping sits in front of the agent (redirects to HTTPS name it)', docDefault: '`HTTPS_PORT`' }),
  METRICS_PORT: port.default(9091).describe('`/metrics` (Prometheus) and `/healthz`'),
  HOST: z.string().min(1).default('::')
    .describe('where the data plane listens: `::` is dual-stack, viewers over IPv6 and IPv4 on one socket (IPv4 only where the host has no IPv6); `0.0.0.0` IPv4 only; an address, that address only. An endpoint with `ipv6_enabled: false` answers viewers arriving over IPv6 with 421'),
  METRICS_HOST: z.string().min(1).default('0.0.0.0').describe('where the metrics port listens'),
  DATA_DIR: z.string().min(1).default('./.data/agent')
    .describe('the last configuration, sealed with a key derived from `AGENT_TOKEN` (the agent restarts from it with the control plane down; another token cannot open it), and the node tier\'s store (`cache/`)'),
  CACHE_MEMORY_BYTES: bytes.default(256 * MiB).describe('the memory cache, shared out among the workers'),
  CACHE_DISK_BYTES: bytes.default(1024 * MiB)
    .describe('the node tier: one LMDB store in `DATA_DIR/cache` shared by every worker, written through on every fill, so an object one worker fetched is a hit at the others, and a miss at several workers at once costs the origin one fetch; kept across restarts (checked at start, a damaged store starting empty with one line; with a control plane nothing kept is served until the purges missed while the node was down are applied). 0: none, each worker then caching on its own'),
  CACHE_MAX_OBJECT_BYTES: bytes.default(32 * MiB).describe('the largest object cached whole'),
  CACHE_SLICE_BYTES: bytes.refine((v) => v === 0 || (v >= 64 * 1024 && v <= 64 * MiB), '0, or between 64KiB and 64MiB').default(MiB)
    .meta({ description: 'large objects are kept in slices of this size, so a seek costs the origin only the slice it falls in and a repeated seek nothing (range misses ask the origin for the slice holding the range); objects without an ETag or Last-Modified, and from origins that ignore Range, are not sliced and stream through above `CACHE_MAX_OBJECT_BYTES`. 0: never', docType: 'bytes: 0, or 64KiB..64MiB' }),
  CACHE_SLICE_THRESHOLD_BYTES: bytes.default(8 * MiB)
    .describe('a full answer larger than this (or than `CACHE_MAX_OBJECT_BYTES`) is kept slice by slice as it streams'),
  REGION: z.string().min(1).max(64).default('local').describe('the region this node belongs to (origin shield, metrics, the edge-nodes list)'),
  SHIELD_ADDRESS: z.string().trim().superRefine((v, ctx) => {
    const problem = shieldAddressProblem(v);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  }).optional()
    .meta({ description: 'origin shield: the address other agents reach this one at to use it as the shield of its `REGION`, advertised to the control plane (see docs/guides/shield.md); unset: this node does not shield', docType: '`http(s)://host:port` URL' }),
  REGION_NAME: z.string().trim().min(1).max(100).regex(/^[^\x00-\x1f\x7f]*$/, 'printable characters').optional()
    .describe('how the region is named in `GET /v1/cdn/shield-regions`'),
  REGION_COUNTRY: z.string().trim().regex(/^[A-Za-z]{2}$/, 'an ISO 3166-1 alpha-2 code such as IE').transform((v) => v.toUpperCase()).optional()
    .meta({ description: 'the region\'s country in `GET /v1/cdn/shield-regions`', docType: 'ISO 3166-1 alpha-2 code' }),
  REGION_CITY: z.string().trim().min(1).max(100).regex(/^[^\x00-\x1f\x7f]*$/, 'printable characters').optional()
    .describe('the region\'s city in `GET /v1/cdn/shield-regions`'),
  CONTROL_PLANE_URL: z.url({ protocol: /^(https?|grpcs?)$/ }).optional()
    .meta({ description: 'the control stream: `grpc://host:port` or `http://` for h2c, `grpcs://` or `https://` for TLS; requires `AGENT_TOKEN`; not with `CONFIG_FILE`', docType: '`grpc(s)://` or `http(s)://` URL' }),
  AGENT_TOKEN: z.string().min(16).optional()
    .describe('the token the control plane issued this agent (`npm run agent-token -- create`); required with `CONTROL_PLANE_URL`; never echoed in an error'),
  CONTROL_PLANE_CA_FILE: z.string().min(1).optional()
    .meta({ description: 'a PEM bundle trusted for a `grpcs://` or `https://` control plane besides the system roots (only with those)', docType: 'path of a PEM file' }),
  NODE_HOSTNAME: z.string().min(1).max(253).regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces').optional()
    .meta({ description: 'the hostname reported to the control plane', docDefault: 'the machine\'s hostname' }),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info')
    .describe('pino level; `debug` logs every request\'s access record (with `denied_by`, `denial_reason` for refusals)'),
  CONFIG_FILE: z.string().min(1).optional()
    .describe('run from a configuration snapshot file instead of a control plane (see docs/guides/edge-agent.md; SIGHUP reads it again); not with `CONTROL_PLANE_URL`'),
  DEFAULT_ENDPOINT: z.string().min(1).optional()
    .meta({ description: 'the id of the endpoint that answers requests whose Host names no endpoint (otherwise 421)', docType: 'an endpoint id', docDefault: 'off' }),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).max(600_000).default(10_000)
    .describe('how long SIGTERM lets in-flight requests finish'),
  REQUEST_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(1000).max(600_000).default(20_000)
    .describe('a viewer must send its request head within this time; at most `REQUEST_TIMEOUT_MS`'),
  REQUEST_TIMEOUT_MS: z.coerce.number().int().min(0).max(86_400_000).default(300_000)
    .describe('the time for a whole viewer request, body included (0: no limit)'),
  REQUEST_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000)
    .describe('the longest a forwarded upload may pause (no body bytes) while the origin reads (0: no limit)'),
  ORIGIN_UPLOAD_CONNECTIONS: z.coerce.number().int().min(1).max(1024).default(32)
    .describe('connections per origin for forwarding requests with a body; cache misses and other bodiless requests have their own'),
  MAX_ENDPOINTS: z.coerce.number().int().min(0).max(10_000_000).default(0)
    .describe('capacity guard: the most endpoints this node accepts (0: no limit). A larger configuration is refused whole (nacked) and the previous one keeps serving; a larger sealed configuration in `DATA_DIR` is not served either: the agent starts without one, with an error line naming the limit'),
  CACHE_WHEN_DISCONNECTED: z.enum(['revalidate', 'serve']).default('revalidate')
    .describe('what the cache does once the agent has been cut off from the control plane for 3 heartbeat intervals: `revalidate` every cached object with the origin before serving it, never serving stale on an origin error, until the stream is back (no purge made meanwhile can be missed), or `serve` it as it is (see docs/guides/purge.md)'),
  TRUST_PROXY_HEADER: z.string().trim().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'a header name such as x-forwarded-for').optional()
    .meta({ description: 'a load balancer in front of the agent reports the viewer\'s address in this header (`x-forwarded-for`, `x-real-ip`, ...); requires `TRUSTED_PROXY_CIDRS`. Only when the connection comes from one of those ranges do IP rules, geo restriction and IP-bound signed URLs judge the address it reports (for a list, the rightmost entry that is not itself a trusted proxy) and does its `X-Forwarded-Proto: https` count as HTTPS for redirects; otherwise the connection\'s own address', docType: 'a header name', docDefault: 'off' }),
  TRUSTED_PROXY_CIDRS: z.string().trim().min(1).optional()
    .meta({ description: 'the proxies allowed to set `TRUST_PROXY_HEADER` (required with it), e.g. `10.0.0.0/8,fd00::/8`', docType: 'comma-separated CIDR ranges' }),
  LOG_DRAIN_BUFFER_BYTES: bytes.default(64 * MiB)
    .describe('per worker, shared by all the log drains: the records they hold while destinations are slow or down, batches in flight included, so a node holds at most `WORKERS` × this whatever the number of drains; a drain may use what the others leave, and once it is full the drain holding the most gives up its newest records to the one that needs room; what does not fit is dropped and counted (`edge_log_drain_buffer_bytes` shows what is held)'),
  LOG_DRAIN_FLUSH_INTERVAL_MS: z.coerce.number().int().min(10).max(600_000).optional()
    .meta({ description: 'a log drain batch\'s longest wait', docDefault: '2 s for http, elasticsearch and datadog; 60 s for s3 and gcs' }),
  LOG_DRAIN_RETRY_MAX_MS: z.coerce.number().int().min(10).max(3_600_000).optional()
    .meta({ description: 'the longest wait between a log drain\'s retries', docDefault: '30 s' }),
}).refine((c) => c.REQUEST_TIMEOUT_MS === 0 || c.REQUEST_HEADERS_TIMEOUT_MS <= c.REQUEST_TIMEOUT_MS, {
  path: ['REQUEST_HEADERS_TIMEOUT_MS'],
  message: 'must not exceed REQUEST_TIMEOUT_MS',
});
const schema = agentConfigSchema;

export type AgentConfig = z.infer<typeof schema>;

function parseBytes(text: string): number {
  const m = /^(\d+)\s*([kKmMgG])?/.exec(text)!;
  const n = Number(m[1]);
  const unit = (m[2] ?? '').toLowerCase();
  return unit === 'k' ? n * 1024 : unit === 'm' ? n * MiB : unit === 'g' ? n * 1024 * MiB : n;
}

/** "--http-port" → "HTTP_PORT"; "--config-file" → "CONFIG_FILE"; "--default-endpoint" → "DEFAULT_ENDPOINT". */
function flagToVar(flag: string): string {
  return flag.replace(/^--/, '').replace(/-/g, '_').toUpperCase();
}

export class ConfigError extends Error {}

export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): AgentConfig {
  const known = new Set(Object.keys(schema.shape));
  const input: Record<string, string> = {};
  for (const name of known) if (env[name] !== undefined && env[name] !== '') input[name] = env[name]!;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new ConfigError(`unexpected argument ${arg}`);
    const eq = arg.indexOf('=');
    const name = flagToVar(eq === -1 ? arg : arg.slice(0, eq));
    if (!known.has(name)) throw new ConfigError(`unknown flag ${eq === -1 ? arg : arg.slice(0, eq)}`);
    let value: string | undefined = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new ConfigError(`${arg} needs a value`);
    input[name] = value;
  }
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue.path[0] ?? 'config');
    // Never echo a secret back.
    const shown = name === 'AGENT_TOKEN' ? '' : ` (got ${JSON.stringify(input[name])})`;
    throw new ConfigError(`${name}: ${issue.message}${shown}`);
  }
  const c = parsed.data;
  if (c.CONTROL_PLANE_URL && !c.AGENT_TOKEN) throw new ConfigError('AGENT_TOKEN: required when CONTROL_PLANE_URL is set');
  if (c.CONTROL_PLANE_URL && c.CONFIG_FILE) {
    throw new ConfigError('CONFIG_FILE: cannot be used with CONTROL_PLANE_URL (the control plane sends the configuration; use one or the other)');
  }
  if (c.CONTROL_PLANE_CA_FILE && !/^(grpcs|https):/.test(c.CONTROL_PLANE_URL ?? '')) {
    throw new ConfigError('CONTROL_PLANE_CA_FILE: only used with a grpcs:// or https:// CONTROL_PLANE_URL');
  }
  if (Boolean(c.TLS_CERT_FILE) !== Boolean(c.TLS_KEY_FILE)) {
    throw new ConfigError(c.TLS_CERT_FILE ? 'TLS_KEY_FILE: required with TLS_CERT_FILE' : 'TLS_CERT_FILE: required with TLS_KEY_FILE');
  }
  if (c.TRUST_PROXY_HEADER && !c.TRUSTED_PROXY_CIDRS) throw new ConfigError('TRUSTED_PROXY_CIDRS: required with TRUST_PROXY_HEADER (the proxies allowed to set it)');
  if (c.TRUSTED_PROXY_CIDRS && !c.TRUST_PROXY_HEADER) throw new ConfigError('TRUST_PROXY_HEADER: required with TRUSTED_PROXY_CIDRS (the header those proxies set)');
  try {
    trustedProxy(c.TRUST_PROXY_HEADER, c.TRUSTED_PROXY_CIDRS);
  } catch (err) {
    throw new ConfigError(`TRUSTED_PROXY_CIDRS: ${(err as Error).message}`);
  }
  return parsed.data;
}
