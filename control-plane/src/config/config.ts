// Control-plane configuration: environment variables (each also a --flag),
// validated once at start. A wrong value stops the process with one line
// naming the variable (see main.ts).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1').meta({ docType: '`true` or `false` (`1`, `0`)' });

function fileIncludes(file: string, marker: string): boolean {
  try {
    return readFileSync(file, 'utf8').includes(marker);
  } catch {
    return false;
  }
}
const readablePem = (file: string) => fileIncludes(file, '-----BEGIN CERTIFICATE-----');
const readableKey = (file: string) => fileIncludes(file, 'PRIVATE KEY-----');

/**
 * Every variable, its parsing and its documentation: `.describe()` (or `.meta()` with `docDefault` for a default
 * computed at start, `docType` where the parser's own shape says too little) is what docs/configuration.md prints
 * (`npm run docs:config`).
 */
export const controlPlaneConfigSchema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development')
    .describe('`production` enables Secure cookies and requires `SECRETS_KEY` and `PAYMENT_GATEWAY`'),
  PORT: port.default(8080).describe('the HTTP API'),
  HOST: z.string().min(1).default('0.0.0.0').describe('the address the HTTP API listens on'),
  GRPC_PORT: port.default(8081).describe('the edge agents\' control channel (gRPC)'),
  GRPC_TLS_CERT_FILE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding a PEM certificate chain (-----BEGIN CERTIFICATE-----)').optional()
    .meta({ description: 'TLS of the control channel (gRPC on `GRPC_PORT`): a PEM certificate chain, with `GRPC_TLS_KEY_FILE` (both or neither; neither: plaintext HTTP/2 (h2c), for loopback or a private network). Read at start', docType: 'path of a PEM file' }),
  GRPC_TLS_KEY_FILE: z.string().max(4096).refine(readableKey, 'Must be a readable file holding a PEM private key (-----BEGIN ... PRIVATE KEY-----)').optional()
    .meta({ description: 'the private key of `GRPC_TLS_CERT_FILE` (both or neither)', docType: 'path of a PEM file' }),
  EDGE_HEARTBEAT_INTERVAL_MS: z.coerce.number().int().min(100).max(300_000).default(5_000)
    .describe('how often edge agents send a heartbeat (told in Welcome); a node silent for 3 intervals is marked offline'),
  EDGE_TRAFFIC_REPORT_INTERVAL_MS: z.coerce.number().int().min(100).max(300_000).default(60_000)
    .describe('how often edge agents send their traffic counts (told in Welcome; counted per minute whatever it is; each report is stored once and confirmed)'),
  EDGE_PURGE_TIMEOUT_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(300_000)
    .describe('how long a purge waits for a node that must apply it (online when it was stored) and has not (gone offline, or silent): then that node is counted failed for it and the purge reads `failed` (see docs/guides/purge.md)'),
  DATA_DIR: z.string().min(1).default('./.data')
    .describe('the embedded database (`pg/`), mail outbox (`outbox/`), uploaded avatars (`avatars/`), personal-data export archives (`exports/`, deleted 24 h after they are ready), the development secrets key'),
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional()
    .meta({ description: 'unset: embedded PGlite in `DATA_DIR/pg`. Each replica holds its pool and one connection that LISTENs for API-token changes (a pooler in transaction mode cannot carry it: the token cache then stays off)', docType: '`postgresql://...` URL' }),
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional()
    .meta({ description: 'unset: an in-process store (single replica only)', docType: '`redis://` or `rediss://` URL' }),
  REDIS_NAMESPACE: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'Must be 1..64 letters, digits, ".", "_" or "-"').optional()
    .meta({ description: 'prefix of every Redis key and pub/sub channel (`<namespace>:`), so deployments sharing one Redis server stay apart; set it on a database restored from another deployment\'s dump that shares its Redis (the copy carries the original\'s id)', docType: '1..64 letters, digits, `.`, `_`, `-`', docDefault: 'the database\'s deployment id' }),
  SMTP_URL: z.url({ protocol: /^smtps?$/ }).optional()
    .meta({ description: 'unset: e-mail is written to `DATA_DIR/outbox`', docType: '`smtp://` or `smtps://` URL' }),
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional()
    .meta({ description: 'the API\'s public address: token issuer, and base of links in e-mails unless `APP_URL` is set', docType: '`http(s)://` URL', docDefault: '`http://localhost:$PORT`' }),
  APP_URL: z.url({ protocol: /^https?$/ }).optional()
    .meta({ description: 'a front end\'s base URL: when set, links in e-mails (`/verify-email?token=…`, `/reset-password?token=…`, `/accept-invitation?token=…`) point there instead of the small pages the control plane serves itself', docType: '`http(s)://` URL' }),
  ADMIN_EMAIL: z.email().max(254).default('admin@example.com')
    .describe('e-mail of the superadmin created on the first start of an empty database (its generated password is printed once; not in production)'),
  SECRETS_KEY: z.string().min(32).optional()
    .meta({ description: '32-byte key (hex or base64) encrypting secrets at rest; **required** when `NODE_ENV=production`', docDefault: 'generated into `DATA_DIR/secrets.key` in development' }),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info')
    .describe('pino level (`silent` to mute)'),
  BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).max(50 * 1024 * 1024).default(1024 * 1024)
    .describe('upper bound for JSON and form bodies (413 above it); multipart uploads have their own limit (avatar: 5 MB)'),
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).default(600)
    .describe('default per-client-address budget of every `/v1` route, in requests per minute; 0 disables it'),
  TRUST_PROXY: bool.default(false).describe('trust `X-Forwarded-For` from a load balancer in front of the control plane'),
  RATE_LIMIT_IP_MULTIPLIER: z.coerce.number().int().min(1).max(10000).default(1)
    .describe('multiplies every per-client-address route limit (login, register, ...), e.g. for clients behind a shared NAT'),
  MAIL_FROM: z.string().min(3).default('Streaming Platform <no-reply@localhost>').describe('sender of platform e-mail'),
  CDN_PUBLISH_MODE: z.enum(['auto', 'manual']).default('auto')
    .describe('`auto` publishes a configuration version after CDN writes (bursts coalesce; a write the edge does not see publishes nothing); `manual` waits for `POST /v1/cdn/config/publish`'),
  CDN_PUBLISH_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(200)
    .describe('with `CDN_PUBLISH_MODE=auto`: how often each replica looks at the configuration revision for writes not yet published'),
  CDN_DOMAIN: z.string().max(200).toLowerCase()
    .regex(/^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$/, 'Must be a DNS name such as cdn.example.net').default('cdn.localhost')
    .meta({ description: 'the DNS zone endpoint hostnames are assigned in (`<random label>.CDN_DOMAIN`); its records point at the edge nodes', docType: 'a DNS name' }),
  CDN_ORIGIN_DNS_TIMEOUT_MS: z.coerce.number().int().min(100).max(30_000).default(2_000)
    .describe('how long an origin\'s host name may take to resolve when an origin is written (the SSRF check); a slower answer is treated like no answer: the write is accepted and the edge\'s dial-time guard still applies'),
  ACME_DIRECTORY_URL: z.url({ protocol: /^https?$/ }).optional()
    .meta({ description: 'the ACME (RFC 8555) directory that issues managed certificates by DNS-01 (e.g. Let\'s Encrypt\'s); unset: the control plane\'s internal CA, which works offline', docType: '`http(s)://` URL' }),
  ACME_EMAIL: z.email().max(254).optional()
    .describe('the ACME account\'s contact address (the CA may send expiry notices there); only with `ACME_DIRECTORY_URL`'),
  ACME_CA_BUNDLE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding PEM certificates (-----BEGIN CERTIFICATE-----)').optional()
    .meta({ description: 'CA certificates to trust for the ACME directory\'s TLS (private ACME servers), besides the system\'s; only with `ACME_DIRECTORY_URL`', docType: 'path of a PEM file' }),
  CUSTOM_CERT_CA_FILE: z.string().max(4096).refine(readablePem, 'Must be a readable file holding PEM certificates (-----BEGIN CERTIFICATE-----)').optional()
    .meta({ description: 'CA certificates a custom domain\'s certificate may chain to (a private PKI), beside Node\'s bundled roots and the system\'s store (`/etc/ssl/certs`)', docType: 'path of a PEM file' }),
  PAYMENT_GATEWAY: z.enum(['test']).optional()
    .meta({ description: 'the payment provider billing tokenizes and charges through; `test` is the built-in test gateway (tokens `tok_visa`, `tok_chargeDeclined`, … listed in `/docs`; takes no money); production must name its gateway explicitly', docDefault: '`test` (must be set in production)' }),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).max(120_000).default(10_000)
    .describe('grace for in-flight requests and running jobs on SIGTERM (jobs still running then go back to the queue)'),
  HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(300_000).default(20_000)
    .describe('time a client has to send a request\'s headers (408 and closed after: slow-loris senders)'),
  REQUEST_TIMEOUT_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(120_000)
    .describe('time a client has to send the whole request, body included (408 and closed after)'),
  JOBS_WORKER: bool.default(true)
    .describe('run background jobs in this process (every replica may, and jobs run once across them; `false` makes an API-only replica, which still enqueues)'),
  JOBS_POLL_MS: z.coerce.number().int().min(10).max(600_000).default(1_000)
    .describe('how long an idle job worker waits between looks at the job table'),
  JOBS_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(4).describe('how many jobs a worker runs at once'),
});
const schema = controlPlaneConfigSchema;

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
