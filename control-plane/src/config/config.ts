// Control-plane configuration: environment variables (each also a --flag),
// validated once at start. A wrong value stops the process with one line
// naming the variable (see main.ts).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');

function fileIncludes(file: string, marker: string): boolean {
  try {
    return readFileSync(file, 'utf8').includes(marker);
  } catch {
    return false;
  }
}
const readablePem = (file: string) => fileIncludes(file, '-----BEGIN CERTIFICATE-----');
const readableKey = (file: string) => fileIncludes(file, 'PRIVATE KEY-----');

const schema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  PORT: port.default(8080),
  HOST: z.string().min(1).default('0.0.0.0'),
  GRPC_PORT: port.default(8081),
  // TLS of the edge agents' control channel (gRPC on GRPC_PORT): both set → TLS with this certificate chain and
  // key (PEM files); neither → plaintext HTTP/2 (h2c), for loopback or a private network.
  GRPC_TLS_CERT_FILE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding a PEM certificate chain (-----BEGIN CERTIFICATE-----)').optional(),
  GRPC_TLS_KEY_FILE: z.string().max(4096).refine(readableKey, 'Must be a readable file holding a PEM private key (-----BEGIN ... PRIVATE KEY-----)').optional(),
  // How often edge agents send a heartbeat (told in Welcome); a node silent for 3 intervals is marked offline.
  EDGE_HEARTBEAT_INTERVAL_MS: z.coerce.number().int().min(100).max(300_000).default(5_000),
  // How often edge agents send their traffic counts (told in Welcome; the counts are per minute whatever it is).
  EDGE_TRAFFIC_REPORT_INTERVAL_MS: z.coerce.number().int().min(100).max(300_000).default(60_000),
  // How long a purge waits for a node that must apply it (online when it was stored) and has not: then that node
  // is counted failed for it (offline, or no answer), and the purge reads failed.
  EDGE_PURGE_TIMEOUT_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(300_000),
  DATA_DIR: z.string().min(1).default('./.data'),
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional(),
  // Prefix of every Redis key and pub/sub channel of this deployment; unset: the database's own deployment id
  // (migration 0032). Two deployments sharing one Redis server must differ (one restored from the other's dump does not).
  REDIS_NAMESPACE: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'Must be 1..64 letters, digits, ".", "_" or "-"').optional(),
  SMTP_URL: z.url({ protocol: /^smtps?$/ }).optional(),
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  // A front end's base URL: when set, links in e-mails (verify e-mail, reset password, invitation) point there
  // instead of the small pages the control plane serves itself.
  APP_URL: z.url({ protocol: /^https?$/ }).optional(),
  // The superadmin created on the first start of an empty database (its generated password is printed once).
  ADMIN_EMAIL: z.email().max(254).default('admin@example.com'),
  SECRETS_KEY: z.string().min(32).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  // Upper bound for JSON and form bodies; multipart uploads have their own limit (avatar: 5 MB).
  BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).max(50 * 1024 * 1024).default(1024 * 1024),
  // Default per-client-address budget of every API route (requests per minute); 0 disables it.
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).default(600),
  // Trust X-Forwarded-For from a load balancer in front of the control plane.
  TRUST_PROXY: bool.default(false),
  // Multiplies every per-client-address route limit (login, register, ...), e.g. for clients behind a shared NAT.
  RATE_LIMIT_IP_MULTIPLIER: z.coerce.number().int().min(1).max(10000).default(1),
  // Sender of platform e-mail.
  MAIL_FROM: z.string().min(3).default('Streaming Platform <no-reply@localhost>'),
  CDN_PUBLISH_MODE: z.enum(['auto', 'manual']).default('auto'),
  // With CDN_PUBLISH_MODE=auto: how often each replica looks at the configuration revision for writes not yet published.
  CDN_PUBLISH_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(200),
  // The DNS zone endpoint hostnames are assigned in (`<random label>.CDN_DOMAIN`); its records point at the edge nodes.
  CDN_DOMAIN: z.string().max(200).toLowerCase()
    .regex(/^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$/, 'Must be a DNS name such as cdn.example.net').default('cdn.localhost'),
  // How long an origin's host name may take to resolve when an origin is written (the SSRF check); a slower
  // answer is treated like no answer: the write is accepted and the edge's dial-time guard still applies.
  CDN_ORIGIN_DNS_TIMEOUT_MS: z.coerce.number().int().min(100).max(30_000).default(2_000),
  // Managed certificates through ACME (RFC 8555, DNS-01) from this directory; unset: the control plane's internal CA.
  ACME_DIRECTORY_URL: z.url({ protocol: /^https?$/ }).optional(),
  // The ACME account's contact address (optional; the CA may send expiry notices there).
  ACME_EMAIL: z.email().max(254).optional(),
  // A PEM file of CA certificates to trust for the ACME directory's TLS (private ACME servers), besides the system's.
  ACME_CA_BUNDLE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding PEM certificates (-----BEGIN CERTIFICATE-----)').optional(),
  // A PEM file of CAs a custom certificate may chain to, beside Node's bundled roots and the system's store (cdn/certificate-trust.ts).
  CUSTOM_CERT_CA_FILE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding PEM certificates (-----BEGIN CERTIFICATE-----)').optional(),
  // The payment provider billing tokenizes and charges through. `test` is the built-in test gateway
  // (well-known tokens, takes no money); production must name its gateway explicitly.
  PAYMENT_GATEWAY: z.enum(['test']).optional(),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).max(120_000).default(10_000),
  // A client must send a request's headers within this time, and the whole request (body included)
  // within REQUEST_TIMEOUT_MS; slower connections are closed (slow-loris senders).
  HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(300_000).default(20_000),
  REQUEST_TIMEOUT_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(120_000),
  // Background jobs: whether this process runs them (every replica may; all may enqueue), how long an idle
  // worker waits between looks at the job table, and how many jobs it runs at once.
  JOBS_WORKER: bool.default(true),
  JOBS_POLL_MS: z.coerce.number().int().min(10).max(600_000).default(1_000),
  JOBS_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(4),
});

export type Config = Omit<z.infer<typeof schema>, 'PAYMENT_GATEWAY'> & {
  PAYMENT_GATEWAY: NonNullable<z.infer<typeof schema>['PAYMENT_GATEWAY']>;
  publicUrl: string;
  /** Base of the links in e-mails: APP_URL when set, otherwise PUBLIC_URL (the control plane's own pages). */
  linkBaseUrl: string;
  dataDir: string;
};

/** Every variable the control plane reads; each is also a flag (`GRPC_PORT` ↔ `--grpc-port`). */
export const configVariables: readonly string[] = Object.keys(schema.shape);

export class ConfigError extends Error {}

/**
 * Reads `--flag value` / `--flag=value` pairs into ENV_NAME keys (`--grpc-port` → GRPC_PORT).
 * With `known`, a flag naming no known variable, or a stray argument, is an error.
 */
export function flagsToEnv(argv: string[], known?: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      if (known) throw new ConfigError(`unexpected argument ${JSON.stringify(arg)} (flags look like --port 9000)`);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = (eq === -1 ? arg.slice(2) : arg.slice(2, eq)).replace(/-/g, '_').toUpperCase();
    if (known && !known.includes(name)) throw new ConfigError(`unknown flag ${eq === -1 ? arg : arg.slice(0, eq)}`);
    const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new ConfigError(`${name}: missing value for --${arg.slice(2)}`);
    out[name] = value;
  }
  return out;
}

export function loadConfig(env: Record<string, string | undefined> = process.env, argv: string[] = []): Config {
  const source: Record<string, string | undefined> = { ...env, ...flagsToEnv(argv, configVariables) };
  // Empty variables count as unset, as in most twelve-factor tooling.
  for (const key of Object.keys(source)) if (source[key] === '') delete source[key];
  const parsed = schema.safeParse(source);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue.path[0] ?? 'config');
    const shown = name.endsWith('_URL') || name.endsWith('_KEY') ? '' : ` (got ${JSON.stringify(source[name])})`;
    throw new ConfigError(`${name}: ${issue.message}${shown}`);
  }
  const c = parsed.data;
  // The test gateway takes no money: a production deployment names its gateway, so it cannot sell for free by default.
  if (c.NODE_ENV === 'production' && !c.PAYMENT_GATEWAY) {
    throw new ConfigError('PAYMENT_GATEWAY: required when NODE_ENV=production (set it to the payment provider; `test` takes no money)');
  }
  if (!c.ACME_DIRECTORY_URL && (c.ACME_EMAIL || c.ACME_CA_BUNDLE)) {
    throw new ConfigError(`${c.ACME_EMAIL ? 'ACME_EMAIL' : 'ACME_CA_BUNDLE'}: only with ACME_DIRECTORY_URL (without it the internal CA issues managed certificates)`);
  }
  if (Boolean(c.GRPC_TLS_CERT_FILE) !== Boolean(c.GRPC_TLS_KEY_FILE)) {
    throw new ConfigError(`${c.GRPC_TLS_CERT_FILE ? 'GRPC_TLS_KEY_FILE' : 'GRPC_TLS_CERT_FILE'}: required with ${c.GRPC_TLS_CERT_FILE ? 'GRPC_TLS_CERT_FILE' : 'GRPC_TLS_KEY_FILE'} (the control channel's TLS needs both the certificate and its key)`);
  }
  const publicUrl = (c.PUBLIC_URL ?? `http://localhost:${c.PORT}`).replace(/\/$/, '');
  return {
    ...c,
    PAYMENT_GATEWAY: c.PAYMENT_GATEWAY ?? 'test',
    dataDir: path.resolve(c.DATA_DIR),
    publicUrl,
    linkBaseUrl: c.APP_URL?.replace(/\/$/, '') ?? publicUrl,
  };
}
