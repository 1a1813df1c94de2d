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

const schema = z.object({
  HTTP_PORT: port.default(8090),
  // Data-plane worker processes behind the same listening addresses (default: one per core); 1 runs a single process.
  WORKERS: z.coerce.number().int().min(1).max(256).default(availableParallelism()),
  // The HTTPS listener (certificates by SNI); `off`: none.
  HTTPS_PORT: z.string().trim().regex(/^(off|\d{1,5})$/, 'a port number (0..65535) or off')
    .transform((v) => (v === 'off' ? 'off' as const : Number(v))).refine((v) => v === 'off' || v <= 65535, 'a port number (0..65535) or off').default(8443),
  // The default certificate: a PEM chain (leaf first) and its key, both or neither. It serves every endpoint's CDN
  // hostname it covers (the wildcard *.CDN_DOMAIN) and connections without SNI; custom domains come with their own.
  // Read again on SIGHUP and when the files change (checked every 30 s).
  TLS_CERT_FILE: z.string().min(1).optional(),
  TLS_KEY_FILE: z.string().min(1).optional(),
  // The HTTPS port viewers reach when a port mapping sits in front of the agent (redirects to HTTPS name it); default HTTPS_PORT.
  HTTPS_PUBLIC_PORT: z.coerce.number().int().min(1).max(65535).optional(),
  METRICS_PORT: port.default(9091),
  // Where the data plane listens: `::` (the default) is dual-stack, IPv6 and IPv4 on one socket (IPv4 only where the
  // host has no IPv6); `0.0.0.0` IPv4 only; an address, that address only.
  HOST: z.string().min(1).default('::'),
  METRICS_HOST: z.string().min(1).default('0.0.0.0'),
  DATA_DIR: z.string().min(1).default('./.data/agent'),
  CACHE_MEMORY_BYTES: bytes.default(256 * MiB),
  CACHE_DISK_BYTES: bytes.default(1024 * MiB),
  CACHE_MAX_OBJECT_BYTES: bytes.default(32 * MiB),
  // Large objects are kept in slices of CACHE_SLICE_BYTES (0: never): range misses ask the origin for the slice holding
  // the range, and full answers above CACHE_SLICE_THRESHOLD_BYTES (or CACHE_MAX_OBJECT_BYTES) are kept slice by slice.
  CACHE_SLICE_BYTES: bytes.refine((v) => v === 0 || (v >= 64 * 1024 && v <= 64 * MiB), '0, or between 64KiB and 64MiB').default(MiB),
  CACHE_SLICE_THRESHOLD_BYTES: bytes.default(8 * MiB),
  REGION: z.string().min(1).max(64).default('local'),
  // Origin shield: the address other agents reach this one at to use it as the shield of its region (an http:// or https://
  // URL with host and port, advertised to the control plane); unset: this node does not shield.
  SHIELD_ADDRESS: z.string().trim().superRefine((v, ctx) => {
    const problem = shieldAddressProblem(v);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  }).optional(),
  // How the region is shown in the shield-regions list: a name, an ISO 3166-1 alpha-2 country code, a city.
  REGION_NAME: z.string().trim().min(1).max(100).regex(/^[^\x00-\x1f\x7f]*$/, 'printable characters').optional(),
  REGION_COUNTRY: z.string().trim().regex(/^[A-Za-z]{2}$/, 'an ISO 3166-1 alpha-2 code such as IE').transform((v) => v.toUpperCase()).optional(),
  REGION_CITY: z.string().trim().min(1).max(100).regex(/^[^\x00-\x1f\x7f]*$/, 'printable characters').optional(),
  CONTROL_PLANE_URL: z.url({ protocol: /^(https?|grpcs?)$/ }).optional(),
  AGENT_TOKEN: z.string().min(16).optional(),
  // A PEM bundle trusted for a grpcs:// or https:// control plane besides the system roots.
  CONTROL_PLANE_CA_FILE: z.string().min(1).optional(),
  // The hostname reported to the control plane (default: the machine's, os.hostname()).
  NODE_HOSTNAME: z.string().min(1).max(253).regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces').optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  CONFIG_FILE: z.string().min(1).optional(),
  DEFAULT_ENDPOINT: z.string().min(1).optional(),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).max(600_000).default(10_000),
  // Viewer request limits: the head must arrive within REQUEST_HEADERS_TIMEOUT_MS, the whole request (body included)
  // within REQUEST_TIMEOUT_MS (0: no limit); a forwarded body may pause at most REQUEST_BODY_IDLE_TIMEOUT_MS (0: no limit).
  REQUEST_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(1000).max(600_000).default(20_000),
  REQUEST_TIMEOUT_MS: z.coerce.number().int().min(0).max(86_400_000).default(300_000),
  REQUEST_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000),
  // Connections per origin for forwarding requests with a body; cache misses and other bodiless requests have their own.
  ORIGIN_UPLOAD_CONNECTIONS: z.coerce.number().int().min(1).max(1024).default(32),
  // Capacity guard: the most endpoints this node accepts (0: no limit). A larger configuration is refused (nacked) whole.
  MAX_ENDPOINTS: z.coerce.number().int().min(0).max(10_000_000).default(0),
  // What the cache does once the agent has been cut off from the control plane for 3 heartbeat intervals: revalidate
  // every cached object with the origin before serving it (no purge made meanwhile can be missed), or serve it as it is.
  CACHE_WHEN_DISCONNECTED: z.enum(['revalidate', 'serve']).default('revalidate'),
  // The viewer's address for IP rules, geo restriction and IP-bound signed URLs: the socket's peer, unless a proxy in front
  // of the agent reports it in this header (x-forwarded-for, x-real-ip...) and the peer is one of TRUSTED_PROXY_CIDRS.
  TRUST_PROXY_HEADER: z.string().trim().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'a header name such as x-forwarded-for').optional(),
  TRUSTED_PROXY_CIDRS: z.string().trim().min(1).optional(),
  // Log drains: the memory all the drains of a worker share for the records they hold while destinations are slow or
  // down (then dropped and counted), and
  // overrides of the batch interval (default 2 s for http, elasticsearch and datadog, 60 s for s3 and gcs) and of the
  // longest wait between retries (default 30 s).
  LOG_DRAIN_BUFFER_BYTES: bytes.default(64 * MiB),
  LOG_DRAIN_FLUSH_INTERVAL_MS: z.coerce.number().int().min(10).max(600_000).optional(),
  LOG_DRAIN_RETRY_MAX_MS: z.coerce.number().int().min(10).max(3_600_000).optional(),
}).refine((c) => c.REQUEST_TIMEOUT_MS === 0 || c.REQUEST_HEADERS_TIMEOUT_MS <= c.REQUEST_TIMEOUT_MS, {
  path: ['REQUEST_HEADERS_TIMEOUT_MS'],
  message: 'must not exceed REQUEST_TIMEOUT_MS',
});

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
