// Local receivers for log-drain tests (issue 24): an HTTP receiver that keeps
// every request and can go down (stop listening) and come back on its port,
// and checkers of the Elasticsearch bulk, Datadog intake and Cloud Storage
// upload formats (with a token endpoint that verifies the service account's
// JWT), plus an S3-compatible server (s3rver, which checks SigV4 signatures).
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { importSPKI, jwtVerify } from 'jose';

interface Teardown { teardown(fn: () => unknown): void }

export interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export interface Receiver {
  port: number;
  url: string;
  requests: Received[];
  /** Every request that arrived, whatever it was answered (requests holds the ones answered 200 by default). */
  arrived: Received[];
  /** Answer every request with this status (and body) instead of 200; null: 200 again. */
  fail: { status: number; body?: string } | null;
  /** Stops listening (connections refused) until up(). */
  down(): Promise<void>;
  up(): Promise<void>;
  /** Handler override: return true when it answered. */
  handle?: (req: Received, res: http.ServerResponse) => boolean;
}

export async function startReceiver(t: Teardown): Promise<Receiver> {
  let server: http.Server;
  const receiver: Receiver = {
    port: 0, url: '', requests: [], arrived: [], fail: null,
    async down() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
    async up() {
      server = make();
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(receiver.port, '127.0.0.1', () => resolve()));
    },
  };
  const make = () => http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => {
      const got: Received = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      receiver.arrived.push(got);
      if (receiver.handle?.(got, res)) return;
      if (receiver.fail) {
        res.writeHead(receiver.fail.status, { 'content-type': 'text/plain' });
        res.end(receiver.fail.body ?? '');
        return;
      }
      receiver.requests.push(got);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  server = make();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  receiver.port = (server.address() as { port: number }).port;
  receiver.url = `http://127.0.0.1:${receiver.port}`;
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  }));
  return receiver;
}

/** The body, gunzipped when it says it is gzip (Content-Encoding) or starts with the gzip magic. */
export function bodyText(r: Received): string {
  const gz = r.headers['content-encoding'] === 'gzip' || (r.body[0] === 0x1f && r.body[1] === 0x8b);
  return (gz ? gunzipSync(r.body) : r.body).toString('utf8');
}

/** An Elasticsearch bulk request's items: each an action line then a document line, checked as it parses. */
export function bulkItems(r: Received): { action: { create: { _index: string; _id: string } }; doc: Record<string, unknown> }[] {
  if (!r.url.endsWith('/_bulk') || r.method !== 'POST') throw new Error(`not a bulk request: ${r.method} ${r.url}`);
  if (r.headers['content-type'] !== 'application/x-ndjson') throw new Error(`bulk content-type ${r.headers['content-type']}`);
  const text = bodyText(r);
  if (!text.endsWith('\n')) throw new Error('a bulk body must end with a newline');
  const lines = text.slice(0, -1).split('\n');
  if (lines.length % 2 !== 0) throw new Error('a bulk body has an action line and a document line per item');
  const items = [];
  for (let i = 0; i < lines.length; i += 2) items.push({ action: JSON.parse(lines[i]!), doc: JSON.parse(lines[i + 1]!) });
  return items;
}

/** A Datadog intake request's entries (POST /api/v2/logs, DD-API-KEY, a JSON array). */
export function datadogEntries(r: Received, apiKey: string): { ddsource: string; service: string; hostname: string; message: string }[] {
  if (r.method !== 'POST' || !r.url.startsWith('/api/v2/logs')) throw new Error(`not a Datadog intake request: ${r.method} ${r.url}`);
  if (r.headers['dd-api-key'] !== apiKey) throw new Error('wrong or missing DD-API-KEY');
  if (r.headers['content-type'] !== 'application/json') throw new Error(`Datadog content-type ${r.headers['content-type']}`);
  const entries = JSON.parse(bodyText(r));
  if (!Array.isArray(entries) || entries.length > 1000) throw new Error('the intake takes a JSON array of at most 1,000 entries');
  return entries;
}

/** A Google service account key (RSA), and its public key for the token endpoint to check assertions. */
export function serviceAccount(tokenUri: string): { json: string; publicKeyPem: string; email: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const email = 'drain-writer@project.iam.gserviceaccount.com';
  const json = JSON.stringify({
    type: 'service_account', project_id: 'project', private_key_id: 'k1', client_email: email, token_uri: tokenUri,
    private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  });
  return { json, publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(), email };
}

export interface GcsFake {
  receiver: Receiver;
  /** Uploaded objects by name. */
  objects: Map<string, Buffer>;
  tokensIssued: number;
}

/**
 * Cloud Storage as the JSON API's media upload sees it, with its OAuth token endpoint: POST /token checks the
 * RFC 7523 assertion (RS256 with the key's public half, iss, aud, scope) and issues a token; uploads need it.
 */
export async function startGcsFake(t: Teardown, publicKeyPem: () => string, email: string, audience?: () => string): Promise<GcsFake> {
  const receiver = await startReceiver(t);
  const fake: GcsFake = { receiver, objects: new Map(), tokensIssued: 0 };
  const tokens = new Set<string>();
  receiver.handle = (r, res) => {
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (receiver.fail) return false;
    if (r.url === '/token') {
      const form = new URLSearchParams(r.body.toString());
      if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer') return json(400, { error: 'unsupported_grant_type' }), true;
      void importSPKI(publicKeyPem(), 'RS256').then((key) => jwtVerify(form.get('assertion') ?? '', key, { issuer: email, audience: audience?.() ?? `${receiver.url}/token` }))
        .then(({ payload }) => {
          if (payload.scope !== 'https://www.googleapis.com/auth/devstorage.read_write') return json(400, { error: 'invalid_scope' });
          const token = `ya29.${crypto.randomUUID()}`;
          tokens.add(token);
          fake.tokensIssued++;
          json(200, { access_token: token, expires_in: 3599, token_type: 'Bearer' });
        }, () => json(400, { error: 'invalid_grant', error_description: 'Invalid JWT Signature.' }));
      return true;
    }
    const url = new URL(r.url, receiver.url);
    const match = /^\/upload\/storage\/v1\/b\/([^/]+)\/o$/.exec(url.pathname);
    if (!match || r.method !== 'POST' || url.searchParams.get('uploadType') !== 'media') return json(404, { error: { code: 404, message: 'Not Found' } }), true;
    const bearer = /^Bearer (.+)$/.exec(r.headers.authorization ?? '')?.[1];
    if (!bearer || !tokens.has(bearer)) return json(401, { error: { code: 401, message: 'Invalid Credentials' } }), true;
    const name = url.searchParams.get('name')!;
    if (url.searchParams.get('ifGenerationMatch') === '0' && fake.objects.has(name)) return json(412, { error: { code: 412, message: 'conditionNotMet' } }), true;
    fake.objects.set(name, r.body);
    receiver.requests.push(r);
    json(200, { kind: 'storage#object', name, bucket: decodeURIComponent(match[1]!), size: String(r.body.length) });
    return true;
  };
  return fake;
}

/**
 * Whether a request carries a valid AWS Signature Version 4 for the secret: the signature is computed again
 * from the request as received (the headers it names as signed, its path and query, its payload hash).
 */
export async function sigV4Valid(r: Received, secretAccessKey: string): Promise<boolean> {
  const { default: aws4 } = await import('aws4');
  const auth = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(String(r.headers.authorization ?? ''));
  if (!auth) return false;
  const [, accessKeyId, , region, service, signed] = auth;
  const headers: Record<string, string> = {};
  for (const name of signed!.split(';')) headers[name] = String(r.headers[name] ?? '');
  const again = aws4.sign({ host: headers.host, path: r.url, method: r.method, service, region, headers, body: r.body }, { accessKeyId: accessKeyId!, secretAccessKey });
  return (again.headers as Record<string, string>).Authorization === r.headers.authorization;
}

export interface S3Fake {
  url: string;
  port: number;
  /** The objects of a bucket: key → gunzipped text. */
  objects(bucket: string): Promise<Map<string, string>>;
  close(): Promise<void>;
}

/** s3rver (an S3-compatible server that checks SigV4 signatures; access key S3RVER, secret S3RVER) with the buckets given. */
export async function startS3Fake(t: Teardown, buckets: string[]): Promise<S3Fake> {
  const { default: S3rver } = await import('s3rver');
  const directory = mkdtempSync(join(tmpdir(), 'sp-s3rver-'));
  const server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory, configureBuckets: buckets.map((name) => ({ name, configs: [] })) });
  const address = await server.run() as unknown as { port: number };
  const port = address.port;
  const url = `http://127.0.0.1:${port}`;
  const close = async () => {
    await server.close().catch(() => {});
    rmSync(directory, { recursive: true, force: true });
  };
  t.teardown(close);
  return {
    url, port, close,
    async objects(bucket) {
      // Read straight from s3rver's directory layout is version-dependent: list and get through its own API instead.
      const { default: aws4 } = await import('aws4');
      const get = async (path: string) => {
        const signed = aws4.sign({ host: `127.0.0.1:${port}`, path, service: 's3', region: 'us-east-1', method: 'GET' }, { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' });
        const res = await fetch(`${url}${signed.path}`, { headers: signed.headers as Record<string, string> });
        return Buffer.from(await res.arrayBuffer());
      };
      const list = (await get(`/${bucket}?list-type=2&max-keys=1000`)).toString();
      const keys = [...list.matchAll(/<Key>([^<]+)<\/Key>/g)].map((m) => m[1]!);
      const out = new Map<string, string>();
      for (const key of keys) out.set(key, gunzipSync(await get(`/${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`)).toString());
      return out;
    },
  };
}

/**
 * How a receiver may write back a header it was sent, in an error answer: as it came, percent-encoded, JSON-escaped
 * (twice), as part of the header block in base64, upper-cased, as the answer's error code, and placed across the
 * 200th character of the body (where error texts were cut before they were scrubbed).
 */
export const ECHO_FORMS: Record<string, (value: string) => string> = {
  'as it came': (v) => `denied: ${v}`,
  'percent-encoded': (v) => `denied: ${encodeURIComponent(v)}`,
  'JSON-escaped': (v) => JSON.stringify({ message: 'denied', request: JSON.stringify({ headers: { authorization: v } }) }),
  'base64 in the header block': (v) => `denied: ${Buffer.from(`x-debug: 1\r\nauthorization: ${v}\r\n`).toString('base64')}`,
  'upper-cased': (v) => `DENIED: ${v.toUpperCase()}`,
  'as the error code': (v) => JSON.stringify({ error: v }),
  'across the 200th character': (v) => `${'x'.repeat(200 - Math.floor(v.length / 2))}${v} and more`,
};

/** The receiver answers every request with `status` and the value of its header `header` written back in `form`. */
export function echoHeader(receiver: Receiver, status: number, header: string, form: (value: string) => string): void {
  receiver.handle = (r, res) => {
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(form(String(r.headers[header] ?? '')));
    return true;
  };
}

/** The forms of a secret found in a text (as it is, any case, percent-encoded, JSON-escaped, base64, or half of it): none for a clean text. */
export function secretShown(text: string, secret: string): string[] {
  const lower = text.toLowerCase();
  const half = secret.slice(0, Math.ceil(secret.length / 2));
  const forms: Record<string, string> = {
    secret, 'percent-encoded': encodeURIComponent(secret), 'JSON-escaped': JSON.stringify(secret).slice(1, -1),
    base64: Buffer.from(secret).toString('base64').slice(0, -4), 'its first half': half,
  };
  const shown = Object.entries(forms).filter(([, f]) => f.length >= 4 && lower.includes(f.toLowerCase())).map(([name]) => name);
  // Base64 at any alignment: every run that looks like base64, decoded.
  const decoded = [...text.matchAll(/[A-Za-z0-9+/_-]{8,}/g)].map((m) => Buffer.from(m[0], 'base64').toString('latin1').toLowerCase());
  if (decoded.some((d) => d.includes(half.toLowerCase()))) shown.push('base64 at some alignment');
  return shown;
}
