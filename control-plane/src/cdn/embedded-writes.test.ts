// The CDN's write operations on the embedded database (PGlite, the default `npm start`), whatever the test
// services: one session, so a statement sent beside an open transaction would wait for it forever (and, in
// test mode, fails at once: db/transaction-guard.ts). Endpoints, origins, domains custom and managed (created,
// validated, replaced, refused, deleted), routes, purges and a publish each answer, and so does the next request.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, cdnState, makeEndpoint, makeOrigin, uniqueName } from '../../../test/support/cdn.ts';
import { makeLeaf, trustedTestCa } from '../../../test/support/certificates.ts';
import type { CdnServices } from './services.ts';

const { ca, env: trustsCa } = await trustedTestCa('Embedded Writes CA');
const cp = await startTestControlPlane(t, { embedded: true, env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa } });
const app = cp.app as unknown as CdnServices;
const { admin } = await cdnCallers(cp);
const send = caller(cp);
const records: Record<string, string[]> = {};
app.cdnDomainResolver = { cname: async (name) => records[`CNAME ${name}`] ?? [], txt: async (name) => records[`TXT ${name}`] ?? [] };

const customPair = async (hostname: string) => {
  const leaf = await makeLeaf(ca, [hostname]);
  return { certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem };
};
/** The request answered as expected, and the database still answers the next one. */
const must = async (status: number, method: string, path: string, json?: unknown) => {
  const res = await send(admin, method, path, json);
  if (res.status !== status) throw new Error(`${method} ${path}: ${res.status} ${res.text}`);
  const next = await send(admin, 'GET', '/v1/cdn/endpoints?limit=1');
  if (next.status !== 200) throw new Error(`after ${method} ${path}: GET /v1/cdn/endpoints ${next.status} ${next.text}`);
  return res.body;
};

t.test('origins, endpoints and routes: created, updated, deleted', async (t) => {
  t.equal(cp.database.real, false, 'the embedded database');
  const origin = await makeOrigin(cp, admin);
  await must(200, 'PATCH', `/v1/cdn/origins/${origin.id}`, { name: uniqueName('renamed origin') });
  const { endpoint } = await makeEndpoint(cp, admin);
  const patched = await must(200, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: uniqueName('renamed endpoint') });
  t.match(patched.name, /^renamed endpoint/);
  await must(201, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: uniqueName('route'), origin_id: origin.id, match: { paths: ['/api/*'] } });
  await must(204, 'DELETE', `/v1/cdn/origins/${(await makeOrigin(cp, admin)).id}`);
});

t.test('custom domain: created, refused a second time with nothing changed, replaced, deleted', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const base = `/v1/cdn/endpoints/${endpoint.id}/domains`;
  const created = await must(201, 'POST', base, { hostname: 'www.embedded.example', certificate_source: 'custom', custom_certificate: await customPair('www.embedded.example') });
  t.equal(created.certificate_status, 'active');
  const before = { ...(await cdnState(cp)), domains: await query(cp, `select * from cdn_custom_domain order by id`) };
  const again = await send(admin, 'POST', base, { hostname: 'www.embedded.example', certificate_source: 'custom', custom_certificate: await customPair('www.embedded.example') });
  t.equal(again.status, 409, again.text);
  const inside = await send(admin, 'POST', base, { hostname: 'x.edge.example.net', certificate_source: 'managed' });
  t.equal(inside.status, 422, inside.text);
  t.same({ ...(await cdnState(cp)), domains: await query(cp, `select * from cdn_custom_domain order by id`) }, before, 'nothing stored by the refused writes');
  const fingerprint = async () => (await query<{ f: string }>(cp, `select certificate_fingerprint as f from cdn_custom_domain where id = ?`, [created.id]))[0]!.f;
  const old = await fingerprint();
  await must(200, 'PUT', `${base}/${created.id}/certificate`, await customPair('www.embedded.example'));
  t.not(await fingerprint(), old, 'the new certificate is stored');
  await must(204, 'DELETE', `${base}/${created.id}`);
});

t.test('managed domain: created with its DNS records, validated, issued', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const base = `/v1/cdn/endpoints/${endpoint.id}/domains`;
  const created = await must(201, 'POST', base, { hostname: 'video.embedded.example', certificate_source: 'managed' });
  t.equal(created.certificate_status, 'pending_validation');
  records[`CNAME ${created.dns_validation.cname_name}`] = [created.dns_validation.cname_value];
  records[`TXT ${created.dns_validation.acme_challenge_name}`] = [created.dns_validation.acme_challenge_value];
  const validated = await must(200, 'POST', `${base}/${created.id}/retry-validation`);
  t.equal(validated.certificate_status, 'active', validated.validation_error ?? '');
});

t.test('purge and publish', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const purge = await must(202, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/index.html'] });
  t.ok(purge.id);
  await must(201, 'POST', '/v1/cdn/config/publish', { description: 'embedded' });
});
