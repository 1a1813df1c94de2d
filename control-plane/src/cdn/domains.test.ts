// Custom domains and certificates through the real server (document 3 §2,
// §3, §4.6; DESIGN.md §3): custom certificates checked with certificates and
// keys made here (wrong host, expired, not yet valid, mismatched key, broken
// chain, wildcard), the managed flow offline end to end (fake resolver →
// retry-validation → active from the internal CA), replacement with overlap,
// the daily check job, delete and the endpoint's 409, roles, and no private
// key in any reply, list, audit entry or log line.
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { pino } from 'pino';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { makeCa, makeLeaf, makeLeafOfKeyType, newKeys, keyPem, trustedTestCa, type LeafKeyType } from '../../../test/support/certificates.ts';
import { DAY, ManualClock } from '../core/clock.ts';
import type { CdnServices } from './services.ts';

const clock = new ManualClock();
// The root custom certificates chain to: trusted by the control plane through CUSTOM_CERT_CA_FILE.
const trusted = await trustedTestCa('Test Root', { now: clock.now() });
const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trusted.env }, clock });
const app = cp.app as unknown as CdnServices;
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);

// Every log line the control plane writes from here on.
const logLines: string[] = [];
const stream = (cp.app.log as any)[pino.symbols.streamSym];
stream.write = (line: string) => { logLines.push(line); return true; };
cp.app.log.level = 'trace';

// The fake DNS: answers by name.
const cnames: Record<string, string[]> = {};
const txts: Record<string, string[]> = {};
app.cdnDomainResolver = { cname: async (name) => cnames[name] ?? [], txt: async (name) => txts[name] ?? [] };

const now = () => clock.now();
/** Certificates keep whole seconds. */
const seconds = (ms: number) => Math.floor(ms / 1000) * 1000;
const root = trusted.ca;
const intermediate = await makeCa('Test Intermediate', { issuer: root, now: now() });
const { endpoint } = await makeEndpoint(cp, admin);
const secrets: string[] = [];
/** A leaf for `names` signed by the intermediate; its key is remembered for the no-leak check. */
const leafFor = async (names: string[], options: Parameters<typeof makeLeaf>[2] = {}) => {
  const leaf = await makeLeaf(intermediate, names, { now: now(), ...options });
  secrets.push(leaf.keyPem);
  return { certificate_pem: leaf.certPem + intermediate.pem, private_key_pem: leaf.keyPem, leaf };
};
const domainRows = async () => ({
  domains: await query(cp, `select * from cdn_custom_domain order by id`),
  audit: (await query<{ n: number }>(cp, `select count(*)::int as n from audit_log`))[0]!.n,
});
const base = `/v1/cdn/endpoints/${endpoint.id}/domains`;

t.test('custom certificate: 201 active with the leaf\'s expiry; the key stored sealed, never shown; audit-logged', async (t) => {
  const cert = await leafFor(['www.example.com']);
  const res = await send(admin, 'POST', base, { hostname: 'WWW.Example.com.', certificate_source: 'custom', custom_certificate: { certificate_pem: cert.certificate_pem, private_key_pem: cert.private_key_pem } });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { endpoint_id: endpoint.id, hostname: 'www.example.com', certificate_source: 'custom', certificate_status: 'active', dns_validation: null, validation_error: null });
  t.equal(res.body.certificate_expires_at, new X509Certificate(cert.leaf.certPem).validToDate.toISOString());
  t.equal(res.headers.get('location'), `${base}/${res.body.id}`);
  t.notOk('custom_certificate' in res.body || 'private_key_pem' in res.body || 'certificate_pem' in res.body);
  const [row] = await query<{ private_key_sealed: string; certificate_pem: string; certificate_issuer: string }>(cp, `select * from cdn_custom_domain where id = ?`, [res.body.id]);
  t.match(row!.private_key_sealed, /^v1\./);
  t.notMatch(row!.private_key_sealed, /PRIVATE KEY/);
  t.equal(row!.certificate_issuer, 'custom');
  t.equal((row!.certificate_pem.match(/BEGIN CERTIFICATE/g) ?? []).length, 2, 'the full chain is kept');
  const read = await send(viewer, 'GET', `${base}/${res.body.id}`);
  t.same(read.body, res.body);
  t.ok(read.headers.get('etag'));
  t.equal((await query(cp, `select 1 from audit_log where action = 'custom_domain.created' and resource_id = ?`, [res.body.id])).length, 1);
});

t.test('a wildcard certificate covers one label below it; a certificate expiring within 30 days is expiring_soon; a leaf a trusted root signed stands alone', async (t) => {
  const wildcard = await leafFor(['*.media.example.org']);
  const ok = await send(admin, 'POST', base, { hostname: 'cdn.media.example.org', certificate_source: 'custom', custom_certificate: { certificate_pem: wildcard.certificate_pem, private_key_pem: wildcard.private_key_pem } });
  t.equal(ok.status, 201, ok.text);
  for (const hostname of ['a.b.media.example.org', 'media.example.org']) {
    const res = await send(admin, 'POST', base, { hostname, certificate_source: 'custom', custom_certificate: { certificate_pem: wildcard.certificate_pem, private_key_pem: wildcard.private_key_pem } });
    t.equal(res.status, 422, `${hostname}: a wildcard covers exactly one label`);
    t.match(res.body.errors?.[0], { field: 'custom_certificate.certificate_pem', message: /does not cover/ });
  }
  const soon = await leafFor(['soon.example.com'], { days: 10 });
  const res = await send(admin, 'POST', base, { hostname: 'soon.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: soon.certificate_pem, private_key_pem: soon.private_key_pem } });
  t.equal(res.body.certificate_status, 'expiring_soon');
  const leafOnly = await makeLeaf(root, ['leafonly.example.com'], { now: now() });
  secrets.push(leafOnly.keyPem);
  const noIntermediate = await send(admin, 'POST', base, { hostname: 'leafonly.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: leafOnly.certPem, private_key_pem: leafOnly.keyPem } });
  t.equal(noIntermediate.status, 201, 'issued by the trusted root itself: the leaf is the whole chain');
});

t.test('bad certificates are refused with 422 INVALID_CONFIGURATION giving the reason, storing nothing', async (t) => {
  const good = await leafFor(['bad.example.com']);
  const otherKey = await keyPem(await newKeys());
  const stranger = await makeCa('Stranger', { now: now() });
  const strangerLeaf = await makeLeaf(stranger, ['bad.example.com'], { now: now() });
  const selfSigned = await makeCa('bad.example.com', { now: now() });
  const selfSignedKey = await keyPem(selfSigned.keys);
  secrets.push(otherKey, strangerLeaf.keyPem, selfSignedKey);
  const pair = (c: { certificate_pem: string; private_key_pem: string }) => ({ certificate_pem: c.certificate_pem, private_key_pem: c.private_key_pem });
  const expired = pair(await leafFor(['bad.example.com'], { startDays: -100, days: 90 }));
  const future = pair(await leafFor(['bad.example.com'], { startDays: 5, days: 90 }));
  const cases: [string, { certificate_pem: string; private_key_pem: string }, string, RegExp][] = [
    ['wrong host', { certificate_pem: (await leafFor(['other.example.com'])).certificate_pem, private_key_pem: good.private_key_pem }, 'certificate_pem', /does not cover bad\.example\.com/],
    ['expired', expired, 'certificate_pem', /has expired/],
    ['not yet valid', future, 'certificate_pem', /not yet valid/],
    ['mismatched key', { certificate_pem: good.certificate_pem, private_key_pem: otherKey }, 'private_key_pem', /does not match/],
    ['self-signed', { certificate_pem: selfSigned.pem, private_key_pem: selfSignedKey }, 'certificate_pem', /self-signed, which proves no control of the hostname/],
    ['a CA not trusted here', { certificate_pem: strangerLeaf.certPem + stranger.pem, private_key_pem: strangerLeaf.keyPem }, 'certificate_pem', /ends at CN=Stranger, a CA not trusted here/],
    ['the intermediate left out', { certificate_pem: good.leaf.certPem, private_key_pem: good.private_key_pem }, 'certificate_pem', /issued by CN=Test Intermediate, which is not a CA trusted here.*full chain/],
    ['broken chain', { certificate_pem: strangerLeaf.certPem + intermediate.pem, private_key_pem: strangerLeaf.keyPem }, 'certificate_pem', /Broken chain/],
    ['chain out of order', { certificate_pem: intermediate.pem + good.leaf.certPem, private_key_pem: good.private_key_pem }, 'certificate_pem', /Broken chain|does not cover/],
    ['a leaf as issuer', { certificate_pem: good.leaf.certPem + strangerLeaf.certPem, private_key_pem: good.private_key_pem }, 'certificate_pem', /not a CA/],
    ['not PEM', { certificate_pem: 'hello', private_key_pem: good.private_key_pem }, 'certificate_pem', /PEM/],
    ['damaged PEM', { certificate_pem: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n', private_key_pem: good.private_key_pem }, 'certificate_pem', /cannot be parsed/],
    ['not a key', { certificate_pem: good.certificate_pem, private_key_pem: 'nope' }, 'private_key_pem', /private key/],
  ];
  const before = await domainRows();
  for (const [what, custom_certificate, field, reason] of cases) {
    const res = await send(admin, 'POST', base, { hostname: 'bad.example.com', certificate_source: 'custom', custom_certificate });
    t.equal(res.status, 422, `${what} → 422`);
    t.equal(res.body.code, 'INVALID_CONFIGURATION');
    t.equal(res.body.errors?.[0]?.field, `custom_certificate.${field}`, what);
    t.match(res.body.errors?.[0]?.message, reason, `${what}: ${res.body.errors?.[0]?.message}`);
  }
  t.same(await domainRows(), before, 'nothing stored');
});

t.test('hostnames: IDNA to punycode; 409 for a name this endpoint claims already; 422 inside CDN_DOMAIN; 400 for bad input; nothing stored on a refusal', async (t) => {
  const idn = await send(admin, 'POST', base, { hostname: 'Bücher.example', certificate_source: 'managed' });
  t.equal(idn.status, 201, idn.text);
  t.equal(idn.body.hostname, 'xn--bcher-kva.example');
  const { endpoint: other } = await makeEndpoint(cp, admin);
  // Not validated yet, the claim blocks no other endpoint (issue 21 item 7: the takeover test below).
  const contending = await send(admin, 'POST', `/v1/cdn/endpoints/${other.id}/domains`, { hostname: 'XN--BCHER-KVA.example', certificate_source: 'managed' });
  t.equal(contending.status, 201, contending.text);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${other.id}/domains/${contending.body.id}`)).status, 204);
  const before = await domainRows();
  const dup = await send(admin, 'POST', base, { hostname: 'XN--BCHER-KVA.example', certificate_source: 'managed' });
  t.equal(dup.status, 409, dup.text);
  t.equal(dup.body.code, 'CONFLICT');
  for (const hostname of ['edge.example.net', 'videos.edge.example.net', endpoint.hostname]) {
    const res = await send(admin, 'POST', base, { hostname, certificate_source: 'managed' });
    t.equal(res.status, 422, hostname);
    t.equal(res.body.errors?.[0]?.field, 'hostname');
  }
  const leafX = await leafFor(['x.example.com']);
  const cert = { certificate_pem: leafX.certificate_pem, private_key_pem: leafX.private_key_pem };
  const cases: [Record<string, unknown>, string][] = [
    [{ certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'a.example.com' }, 'certificate_source'],
    [{ hostname: 'a.example.com', certificate_source: 'acme' }, 'certificate_source'],
    [{ hostname: '*.example.com', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'a.*.example.com', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'localhost', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: '192.168.1.10', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'a_b.example.com', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: '-a.example.com', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'a..example.com', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'a.example.com:443', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: `${'a'.repeat(64)}.example.com`, certificate_source: 'managed' }, 'hostname'],
    [{ hostname: `${'abcdefghi.'.repeat(25)}example.com`, certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'https://a.example.com/', certificate_source: 'managed' }, 'hostname'],
    [{ hostname: 'x.example.com', certificate_source: 'custom' }, 'custom_certificate'],
    [{ hostname: 'x.example.com', certificate_source: 'managed', custom_certificate: cert }, 'custom_certificate'],
    [{ hostname: 'x.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: cert.certificate_pem } }, 'custom_certificate.private_key_pem'],
    [{ hostname: 'x.example.com', certificate_source: 'custom', custom_certificate: { ...cert, extra: 1 } }, 'custom_certificate.extra'],
    [{ hostname: 'x.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: 'x'.repeat(65_537), private_key_pem: 'k' } }, 'custom_certificate.certificate_pem'],
    [{ hostname: 'x.example.com', certificate_source: 'managed', certificate_status: 'active' }, 'certificate_status'],
  ];
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, body);
    t.equal(res.status, 400, `${JSON.stringify(body).slice(0, 90)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)?.slice(0, 300)}`);
  }
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/domains`, { hostname: 'n.example.com', certificate_source: 'managed' })).status, 404);
  t.same(await domainRows(), before, 'nothing stored');
});

t.test('managed: DNS records returned; retry-validation through the resolver; issued by the internal CA; active', async (t) => {
  const created = await send(admin, 'POST', base, { hostname: 'video.example.com', certificate_source: 'managed' });
  t.equal(created.status, 201, created.text);
  const d = created.body;
  t.match(d, { certificate_status: 'pending_validation', certificate_expires_at: null });
  t.match(d.dns_validation, { cname_name: 'video.example.com', cname_value: endpoint.hostname, acme_challenge_name: '_acme-challenge.video.example.com', acme_challenge_value: /^[A-Za-z0-9_-]{43}$/ });
  const retryPath = `${base}/${d.id}/retry-validation`;
  const missing = await send(admin, 'POST', retryPath);
  t.equal(missing.status, 200, missing.text);
  t.equal(missing.body.certificate_status, 'pending_validation');
  t.match(missing.body.validation_error, /CNAME video\.example\.com.*TXT _acme-challenge/);
  cnames['video.example.com'] = [endpoint.hostname];
  const half = await send(admin, 'POST', retryPath);
  t.notMatch(half.body.validation_error, /CNAME/);
  t.match(half.body.validation_error, /TXT/);
  txts['_acme-challenge.video.example.com'] = ['unrelated', d.dns_validation.acme_challenge_value];
  const active = await send(admin, 'POST', retryPath);
  t.equal(active.status, 200);
  t.match(active.body, { certificate_status: 'active', validation_error: null });
  t.equal(new Date(active.body.certificate_expires_at).getTime(), seconds(now().getTime() + 90 * DAY), 'valid for 90 days');
  const [row] = await query<{ certificate_pem: string; certificate_issuer: string }>(cp, `select certificate_pem, certificate_issuer from cdn_custom_domain where id = ?`, [d.id]);
  const [ca] = await query<{ certificate_pem: string; private_key_sealed: string }>(cp, `select * from cdn_internal_ca`);
  t.equal(row!.certificate_issuer, 'internal_ca');
  t.notMatch(ca!.private_key_sealed, /PRIVATE KEY/, 'the CA key is sealed');
  const leaf = new X509Certificate(row!.certificate_pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/)![0]);
  const caCert = new X509Certificate(ca!.certificate_pem);
  t.ok(leaf.checkIssued(caCert) && leaf.verify(caCert.publicKey), 'signed by the internal CA');
  t.equal(leaf.checkHost('video.example.com'), 'video.example.com');
  const again = await send(admin, 'POST', retryPath);
  t.same(again.body, active.body, 'no effect once active');
  const custom = (await send(viewer, 'GET', `${base}?certificate_status=active`)).body.data.find((x: any) => x.certificate_source === 'custom');
  const unchanged = await send(admin, 'POST', `${base}/${custom.id}/retry-validation`);
  t.same(unchanged.body, custom, 'no effect on a custom certificate');
  const second = await send(admin, 'POST', base, { hostname: 'video2.example.com', certificate_source: 'managed' });
  cnames['video2.example.com'] = [endpoint.hostname];
  txts['_acme-challenge.video2.example.com'] = [second.body.dns_validation.acme_challenge_value];
  await send(admin, 'POST', `${base}/${second.body.id}/retry-validation`);
  t.equal((await query(cp, `select 1 from cdn_internal_ca`)).length, 1, 'one CA for every managed certificate');
});

t.test('regression: an unvalidated claim no longer blocks the real owner; the claim validated first takes the name, the others are failed saying why', async (t) => {
  // A squatter claims the name first; it cannot publish the DNS records, so it never validates.
  const { endpoint: squatter } = await makeEndpoint(cp, admin);
  const squatted = await send(admin, 'POST', `/v1/cdn/endpoints/${squatter.id}/domains`, { hostname: 'shop.example.org', certificate_source: 'managed' });
  t.equal(squatted.status, 201, squatted.text);
  const owner = await send(admin, 'POST', base, { hostname: 'shop.example.org', certificate_source: 'managed' });
  t.equal(owner.status, 201, 'the real owner can claim the name too (it used to be a 409)');
  t.not(owner.body.dns_validation.acme_challenge_value, squatted.body.dns_validation.acme_challenge_value, 'each claim has its own challenge');
  // The owner points the name at its endpoint and publishes its own TXT value.
  cnames['shop.example.org'] = [endpoint.hostname];
  txts['_acme-challenge.shop.example.org'] = [owner.body.dns_validation.acme_challenge_value];
  const squatterTry = await send(admin, 'POST', `/v1/cdn/endpoints/${squatter.id}/domains/${squatted.body.id}/retry-validation`);
  t.equal(squatterTry.body.certificate_status, 'pending_validation', 'the squatter cannot prove control');
  const validated = await send(admin, 'POST', `${base}/${owner.body.id}/retry-validation`);
  t.match(validated.body, { certificate_status: 'active', validation_error: null });
  const lost = (await send(admin, 'GET', `/v1/cdn/endpoints/${squatter.id}/domains/${squatted.body.id}`)).body;
  t.match(lost, { certificate_status: 'failed', validation_error: /^Taken over: shop\.example\.org was validated for another endpoint/ });
  const [audit] = await query<{ action: string }>(cp, `select action from audit_log where resource_id = ? order by created_at desc limit 1`, [squatted.body.id]);
  t.equal(audit!.action, 'custom_domain.taken_over');
  const retried = await send(admin, 'POST', `/v1/cdn/endpoints/${squatter.id}/domains/${squatted.body.id}/retry-validation`);
  t.equal(retried.body.certificate_status, 'failed', 'a claim taken over is not issued a certificate, whatever DNS says');
  const before = await domainRows();
  const { endpoint: third } = await makeEndpoint(cp, admin);
  const late = await send(admin, 'POST', `/v1/cdn/endpoints/${third.id}/domains`, { hostname: 'shop.example.org', certificate_source: 'managed' });
  t.equal(late.status, 409, 'a validated name is refused to everyone else');
  t.match(late.body.message, /validated custom domain of another endpoint/);
  t.same((await domainRows()).domains, before.domains, 'nothing stored');
  // A custom certificate that covers the name validates a claim at once: it takes over the unvalidated ones too.
  const pending = await send(admin, 'POST', `/v1/cdn/endpoints/${squatter.id}/domains`, { hostname: 'tv.example.org', certificate_source: 'managed' });
  const cert = await leafFor(['tv.example.org']);
  const custom = await send(admin, 'POST', base, { hostname: 'tv.example.org', certificate_source: 'custom', custom_certificate: { certificate_pem: cert.certificate_pem, private_key_pem: cert.private_key_pem } });
  t.equal(custom.status, 201, custom.text);
  t.match((await send(admin, 'GET', `/v1/cdn/endpoints/${squatter.id}/domains/${pending.body.id}`)).body, { certificate_status: 'failed', validation_error: /^Taken over/ });
});

t.test('list per endpoint and per distribution: oldest first, certificate_status filter, paging; read of another endpoint\'s domain 404', async (t) => {
  const all = await send(viewer, 'GET', `${base}?limit=100`);
  t.equal(all.status, 200);
  const alias = await send(viewer, 'GET', `/v1/cdn/distributions/${endpoint.id}/domains?limit=100`);
  t.same(alias.body, all.body);
  const times = all.body.data.map((d: any) => d.created_at);
  t.same(times, [...times].sort(), 'oldest first');
  const pending = await send(viewer, 'GET', `${base}?certificate_status=pending_validation`);
  t.ok(pending.body.data.every((d: any) => d.certificate_status === 'pending_validation') && pending.body.data.length >= 1);
  const first = await send(viewer, 'GET', `${base}?limit=1`);
  const next = await send(viewer, 'GET', `${base}?limit=1&cursor=${first.body.meta.next_cursor}`);
  t.equal(next.body.data[0].id, all.body.data[1].id);
  t.equal((await send(viewer, 'GET', `${base}?certificate_status=valid`)).status, 400);
  const { endpoint: other } = await makeEndpoint(cp, admin);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${other.id}/domains/${all.body.data[0].id}`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${crypto.randomUUID()}/domains`)).status, 404);
});

t.test('PUT certificate: replaced in one write, the old one kept for the overlap; bad ones 422 with nothing changed; managed domains 409', async (t) => {
  const first = await leafFor(['swap.example.com']);
  const created = (await send(admin, 'POST', base, { hostname: 'swap.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: first.certificate_pem, private_key_pem: first.private_key_pem } })).body;
  const path = `${base}/${created.id}/certificate`;
  const before = await domainRows();
  const wrong = await leafFor(['elsewhere.example.com']);
  const refused = await send(admin, 'PUT', path, { certificate_pem: wrong.certificate_pem, private_key_pem: wrong.private_key_pem });
  t.equal(refused.status, 422);
  t.equal(refused.body.errors?.[0]?.field, 'certificate_pem');
  t.equal((await send(admin, 'PUT', path, { certificate_pem: first.certificate_pem })).status, 400);
  t.same(await domainRows(), before, 'nothing changed');
  const next = await leafFor(['swap.example.com'], { days: 200 });
  const res = await send(admin, 'PUT', path, { certificate_pem: next.certificate_pem, private_key_pem: next.private_key_pem });
  t.equal(res.status, 200, res.text);
  t.equal(res.body.certificate_expires_at, new X509Certificate(next.leaf.certPem).validToDate.toISOString());
  const [row] = await query<any>(cp, `select * from cdn_custom_domain where id = ?`, [created.id]);
  t.equal(row.previous_certificate_pem, (before.domains.find((d: any) => d.id === created.id) as any).certificate_pem, 'the superseded certificate stays for the overlap');
  t.equal(new Date(row.previous_retires_at).getTime(), now().getTime() + DAY);
  t.ok(new X509Certificate(row.certificate_pem).checkPrivateKey((await import('node:crypto')).createPrivateKey(next.private_key_pem)));
  const audit = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'custom_domain.certificate_replaced' and resource_id = ?`, [created.id]);
  t.ok(audit[0]?.metadata.changes.certificate_fingerprint);
  const managed = (await send(viewer, 'GET', `${base}?certificate_status=pending_validation`)).body.data[0];
  t.equal((await send(admin, 'PUT', `${base}/${managed.id}/certificate`, { certificate_pem: next.certificate_pem, private_key_pem: next.private_key_pem })).status, 409);
});

t.test('certificates the edge cannot serve (RSA-1024, secp256k1, brainpool) are 422 at creation and at replacement, changing nothing; RSA-2048 and P-384 are taken', async (t) => {
  const leafOf = async (hostname: string, type: LeafKeyType) => {
    const leaf = await makeLeafOfKeyType(intermediate, [hostname], type, { now: now() });
    secrets.push(leaf.keyPem);
    return { certificate_pem: leaf.certPem + intermediate.pem, private_key_pem: leaf.keyPem };
  };
  const served = await send(admin, 'POST', base, { hostname: 'servable.example.com', certificate_source: 'custom', custom_certificate: await leafOf('servable.example.com', 'rsa-2048') });
  t.equal(served.status, 201, served.text);
  const p384 = await send(admin, 'PUT', `${base}/${served.body.id}/certificate`, await leafOf('servable.example.com', 'p-384'));
  t.equal(p384.status, 200, p384.text);
  const before = await domainRows();
  const cases = [['rsa-1024', /RSA key of 1024 bits is too short/], ['secp256k1', /ECDSA key on secp256k1 is not served/], ['brainpoolP256r1', /ECDSA key on brainpoolP256r1 is not served/]] as const;
  for (const [type, reason] of cases) {
    const created = await send(admin, 'POST', base, { hostname: 'unservable.example.com', certificate_source: 'custom', custom_certificate: await leafOf('unservable.example.com', type) });
    t.equal(created.status, 422, `create ${type}`);
    t.match(created.body.errors?.[0], { field: 'custom_certificate.certificate_pem', message: reason });
    const replaced = await send(admin, 'PUT', `${base}/${served.body.id}/certificate`, await leafOf('servable.example.com', type));
    t.equal(replaced.status, 422, `replace ${type}`);
    t.match(replaced.body.errors?.[0], { field: 'certificate_pem', message: reason });
  }
  t.same(await domainRows(), before, 'nothing stored, the served certificate kept');
});

t.test('prefetch accepts URLs on the endpoint\'s custom domains', async (t) => {
  const res = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: ['https://www.example.com/a.mp4', 'https://xn--bcher-kva.example/b'] });
  t.equal(res.status, 202, res.text);
});

t.test('roles: admins write; operators and viewers read; subscribers 403; anonymous 401; nothing changes', async (t) => {
  const before = await domainRows();
  const some = before.domains[0] as any;
  for (const who of [operator, viewer]) {
    t.equal((await send(who, 'POST', base, { hostname: 'r.example.com', certificate_source: 'managed' })).status, 403);
    t.equal((await send(who, 'DELETE', `${base}/${some.id}`)).status, 403);
    t.equal((await send(who, 'POST', `${base}/${some.id}/retry-validation`)).status, 403);
    t.equal((await send(who, 'GET', base)).status, 200);
  }
  t.equal((await send(subscriber, 'GET', base)).status, 403);
  t.equal((await send(null, 'GET', base)).status, 401);
  t.same(await domainRows(), before);
});

t.test('delete detaches the domain; an endpoint with domains cannot be deleted (409) until they are gone', async (t) => {
  const { endpoint: doomed } = await makeEndpoint(cp, admin);
  const d = (await send(admin, 'POST', `/v1/cdn/distributions/${doomed.id}/domains`, { hostname: 'doomed.example.com', certificate_source: 'managed' })).body;
  const refused = await send(admin, 'DELETE', `/v1/cdn/endpoints/${doomed.id}`);
  t.equal(refused.status, 409);
  t.equal(refused.body.code, 'RESOURCE_IN_USE');
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/domains/${d.id}`)).status, 404, 'through another endpoint: not found');
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${doomed.id}/domains/${d.id}`)).status, 204);
  t.equal((await query(cp, `select 1 from audit_log where action = 'custom_domain.deleted' and resource_id = ?`, [d.id])).length, 1);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${doomed.id}/domains`, { hostname: 'doomed.example.com', certificate_source: 'managed' })).status, 201, 'the hostname is free again');
  const again = (await send(viewer, 'GET', `/v1/cdn/endpoints/${doomed.id}/domains`)).body.data[0];
  await send(admin, 'DELETE', `/v1/cdn/endpoints/${doomed.id}/domains/${again.id}`);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${doomed.id}`)).status, 204);
});

t.test('no private key appears in any reply, list, audit entry or log line', async (t) => {
  t.ok(secrets.length > 5 && logLines.length > 0, `${secrets.length} keys, ${logLines.length} log lines`);
  const replies = [
    (await send(viewer, 'GET', `${base}?limit=100`)).text,
    ...(await Promise.all((await send(viewer, 'GET', `${base}?limit=100`)).body.data.map(async (d: any) => (await send(viewer, 'GET', `${base}/${d.id}`)).text))),
  ];
  const audit = JSON.stringify(await query(cp, `select * from audit_log`));
  const [ca] = await query<{ private_key_sealed: string }>(cp, `select private_key_sealed from cdn_internal_ca`);
  const caKey = app.secretBox.openString(ca!.private_key_sealed, 'cdn_internal_ca:1');
  const issuedKeys = (await query<{ id: string; private_key_sealed: string | null }>(cp, `select id, private_key_sealed from cdn_custom_domain where private_key_sealed is not null`))
    .map((r) => app.secretBox.openString(r.private_key_sealed!, `cdn_custom_domain:${r.id}`));
  const body = (pem: string) => pem.replace(/-----[A-Z ]+-----/g, '').replace(/\s+/g, '').slice(0, 60);
  for (const key of [...secrets, caKey, ...issuedKeys]) {
    for (const [where, text] of [['replies', replies.join('\n')], ['audit', audit], ['logs', logLines.join('')]] as const) {
      if (text.replace(/\\n|\s/g, '').includes(body(key))) t.fail(`a private key appears in the ${where}`);
    }
  }
  t.notMatch(replies.join('') + audit + logLines.join(''), /PRIVATE KEY/);
});

// Last: the clock jumps months ahead (access tokens issued before do not survive it).
t.test('the daily job: custom certificates move to expiring_soon, then expired; managed ones are renewed; overlaps end', async (t) => {
  const short = await leafFor(['short.example.com'], { days: 45 });
  const custom = (await send(admin, 'POST', base, { hostname: 'short.example.com', certificate_source: 'custom', custom_certificate: { certificate_pem: short.certificate_pem, private_key_pem: short.private_key_pem } })).body;
  t.equal(custom.certificate_status, 'active');
  const managed = (await send(viewer, 'GET', `${base}?limit=100`)).body.data.find((d: any) => d.hostname === 'video.example.com');
  await cp.app.jobs.runDue(); // plans the daily schedule from now
  // (Access tokens do not survive the clock's jumps: the state is read from the table.)
  const stateOf = async (id: string) => (await query<{ certificate_status: string; certificate_expires_at: Date }>(cp, `select certificate_status, certificate_expires_at from cdn_custom_domain where id = ?`, [id]))[0]!;
  clock.advance(20 * DAY);
  await cp.app.jobs.runDue();
  t.equal((await stateOf(custom.id)).certificate_status, 'expiring_soon');
  t.equal(new Date((await stateOf(managed.id)).certificate_expires_at).toISOString(), managed.certificate_expires_at, 'a managed certificate is not renewed early');
  t.equal((await query(cp, `select 1 from cdn_custom_domain where previous_certificate_pem is not null`)).length, 0, 'overlaps ended');
  clock.advance(40 * DAY);
  await cp.app.jobs.runDue();
  t.equal((await stateOf(custom.id)).certificate_status, 'expired');
  const renewed = await stateOf(managed.id);
  t.equal(renewed.certificate_status, 'active');
  t.equal(new Date(renewed.certificate_expires_at).getTime(), seconds(now().getTime() + 90 * DAY), 'renewed for 90 days from now');
  const audit = await query<{ action: string; actor_type: string | null }>(cp, `select action from audit_log where resource_id in (?, ?) and action like 'custom_domain.certificate_%' order by created_at`, [custom.id, managed.id]);
  t.same(audit.map((a) => a.action).sort(), ['custom_domain.certificate_expired', 'custom_domain.certificate_expiring_soon', 'custom_domain.certificate_renewed']);
});
