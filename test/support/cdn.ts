// Helpers for the CDN contract tests: callers of each CDN role and valid
// resources made through the API.
import type { TestControlPlane } from './control-plane.ts';
import { bearer, createAdmin, createLoggedInUser, query, type TestAccount } from './auth.ts';

export interface CdnCallers {
  admin: TestAccount;
  operator: TestAccount;
  viewer: TestAccount;
  subscriber: TestAccount;
}

export async function cdnCallers(cp: TestControlPlane): Promise<CdnCallers> {
  return {
    admin: await createAdmin(cp),
    operator: await createLoggedInUser(cp, { roles: ['operator'] }),
    viewer: await createLoggedInUser(cp, { roles: ['viewer'] }),
    subscriber: await createLoggedInUser(cp),
  };
}

export const caller = (cp: TestControlPlane) =>
  (who: TestAccount | null, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
    cp.request(method, path, { headers: who ? bearer(who.accessToken, headers) : headers, json });

/** Calls as `who` and returns the body, throwing unless the answer is 2xx: a flow test's setup steps. */
export const mustCaller = (cp: TestControlPlane, who: TestAccount) => {
  const send = caller(cp);
  return async (method: string, path: string, json?: unknown) => {
    const res = await send(who, method, path, json);
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`);
    return res.body;
  };
};

/**
 * The control plane's write-time DNS check (cdnHostLookup) for a test whose hosts are documentation names
 * (media.example.com: the API's own examples): no answer, as when a name does not resolve yet, which the check
 * accepts. The real lookup would ask the machine's resolver, beyond loopback (test/support/loopback-only.mjs).
 */
export const noDnsAnswers = { cdnHostLookup: async (): Promise<string[]> => [] };

let sequence = 0;
export const uniqueName = (tag: string) => `${tag} ${process.pid}-${++sequence}`;

/** An origin on a public address (no DNS needed), created through the API. */
export async function makeOrigin(cp: TestControlPlane, admin: TestAccount, body: Record<string, unknown> = {}) {
  const res = await caller(cp)(admin, 'POST', '/v1/cdn/origins', { name: uniqueName('origin'), host: '93.184.216.10', ...body });
  if (res.status !== 201) throw new Error(`create origin: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

/** An endpoint with a fresh default origin. */
export async function makeEndpoint(cp: TestControlPlane, admin: TestAccount, body: Record<string, unknown> = {}) {
  const origin = await makeOrigin(cp, admin);
  const res = await caller(cp)(admin, 'POST', '/v1/cdn/endpoints', { name: uniqueName('endpoint'), default_origin_id: origin.id, ...body });
  if (res.status !== 201) throw new Error(`create endpoint: ${res.status} ${res.text}`);
  return { endpoint: res.body as Record<string, any> & { id: string }, origin };
}

/** Rows of the CDN tables as they are (to show a refused request changed nothing). */
export async function cdnState(cp: TestControlPlane) {
  const rows = async (table: string) => query(cp, `select * from ${table} order by id`);
  return {
    endpoints: await rows('cdn_endpoint'), origins: await rows('cdn_origin'), routes: await rows('cdn_route'), cache_rules: await rows('cdn_cache_rule'),
    audit: (await query<{ n: number }>(cp, `select count(*)::int as n from audit_log`))[0]!.n,
  };
}
