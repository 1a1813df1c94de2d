// Pieces of the whole-system and fault tests (test/system/): a user's way
// from sign-up to a paid subscription against a control-plane process, a
// publish waited for on every agent, and an origin whose content changes.
import http from 'node:http';
import { waitForMessage } from '../../control-plane/src/mail/outbox.ts';
import { PASSWORD, uniqueEmail, VERIFY_SUBJECT } from './auth.ts';
import type { Deployment } from './edge-deployment.ts';
import { eventually } from './eventually.ts';

interface Teardown { teardown(fn: () => unknown): void }

async function call(baseUrl: string, method: string, path: string, json?: unknown, token?: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(json === undefined ? {} : { 'content-type': 'application/json' }) },
    body: json === undefined ? undefined : JSON.stringify(json),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function expect(baseUrl: string, status: number, method: string, path: string, json?: unknown, token?: string): Promise<any> {
  const res = await call(baseUrl, method, path, json, token);
  if (res.status !== status) throw new Error(`${method} ${path}: ${res.status} (expected ${status}) ${JSON.stringify(res.body)}`);
  return res.body;
}

/**
 * A visitor's way through the control-plane process as a client sees it: registers, follows the link of the
 * verification e-mail (read from the process's outbox), logs in, adds a test-gateway card and subscribes to a
 * plan the deployment's superadmin creates (EUR 9.99 a month), which charges the card.
 */
export async function signUpAndSubscribe(deployment: Deployment, outboxDir: string) {
  const base = deployment.process.url;
  const email = uniqueEmail('system');
  await expect(base, 201, 'POST', '/v1/auth/register', { email, password: PASSWORD, accept_terms: true });
  const message = await waitForMessage(outboxDir, { to: email, subject: VERIFY_SUBJECT }, { timeoutMs: 15_000 });
  const link = message.links.find((l) => new URL(l).searchParams.has('token'));
  if (!link) throw new Error(`no verification link in "${message.subject}"`);
  await expect(base, 200, 'POST', '/v1/auth/email/verify', { token: new URL(link).searchParams.get('token'), password: PASSWORD });
  const token = (await expect(base, 200, 'POST', '/v1/auth/login', { email, password: PASSWORD })).data.access_token as string;
  const plan = await deployment.must('POST', '/v1/admin/plans', {
    name: 'Standard', type: 'svod', price: 9.99, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 2, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true,
  });
  const card = (await expect(base, 201, 'POST', '/v1/payment-methods', { payment_method_token: 'tok_visa', set_as_default: true }, token)).data;
  const subscription = (await expect(base, 201, 'POST', '/v1/subscriptions', { plan_id: plan.data.id, payment_method_id: card.id }, token)).data;
  const invoices = (await expect(base, 200, 'GET', '/v1/invoices', undefined, token)).data as Record<string, unknown>[];
  const me = (await expect(base, 200, 'GET', '/v1/users/me', undefined, token)).data as Record<string, unknown>;
  return { email, token, subscription, invoices, me };
}

/** Publishes the current configuration and waits until `nodes` agents acknowledged it; the version. */
export async function publishAndWait(deployment: Pick<Deployment, 'must'>, description: string, nodes: number): Promise<{ id: string; version_number: number }> {
  const version = await deployment.must('POST', '/v1/cdn/config/publish', { description });
  await eventually(async () => (await deployment.must('GET', `/v1/cdn/config/versions/${version.id}`)).propagation_status.synced_nodes >= nodes, `${description}: ${nodes} agents acked`);
  return version;
}

export interface VersionedOrigin {
  port: number;
  /** Viewers' requests the origin answered for the path (all paths without one); agents' health probes left out. */
  asked(path?: string): number;
  /** The content changes (every path answers `<path> v<n+1>`), as a publisher's does before it purges. */
  bump(): void;
  version(): number;
}

/** An origin answering every GET with `<path> v<version>` and no freshness information (the cache rules decide). */
export async function versionedOrigin(t: Teardown): Promise<VersionedOrigin> {
  let version = 1;
  const asked = new Map<string, number>();
  const server = http.createServer((req, res) => {
    if (req.headers['user-agent'] !== 'edge-agent-health/1') asked.set(req.url ?? '', (asked.get(req.url ?? '') ?? 0) + 1);
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`${req.url} v${version}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return {
    port: (server.address() as { port: number }).port,
    asked: (path) => (path === undefined ? [...asked.values()].reduce((a, b) => a + b, 0) : asked.get(path) ?? 0),
    bump: () => { version++; },
    version: () => version,
  };
}
