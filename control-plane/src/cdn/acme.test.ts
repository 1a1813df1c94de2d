// Managed certificates through ACME against a real ACME server (Debian's
// pebble, with pebble-challtestsrv as the DNS its validation reads): create →
// DNS-01 records returned → TXT published → retry-validation → active with a
// chain from pebble; a wrong TXT → failed with the reason, then a new order;
// the daily job renews through a new challenge; delete revokes; pebble
// unreachable → a clear state, never a 5xx. Without pebble the file skips
// (fails under CI=true, where .ci/run installs it).
import t from 'tap';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createAdmin, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, makeEndpoint } from '../../../test/support/cdn.ts';
import { PEBBLE_INSTALL_HINT, pebbleInstalled, startPebble } from '../../../test/support/pebble.ts';
import { DAY, ManualClock } from '../core/clock.ts';
import type { CdnServices } from './services.ts';

if (!pebbleInstalled()) {
  if (process.env.CI === 'true') t.fail(PEBBLE_INSTALL_HINT);
  else t.test('ACME issuance against pebble', { skip: PEBBLE_INSTALL_HINT }, async () => {});
} else {
  await acmeTests();
}

async function acmeTests() {
  const pebble = await startPebble(t);
  const clock = new ManualClock();
  const cp = await startTestControlPlane(t, {
    env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ACME_DIRECTORY_URL: pebble.directoryUrl, ACME_CA_BUNDLE: pebble.caBundle, ACME_EMAIL: 'certs@example.com' },
    clock,
  });
  const app = cp.app as unknown as CdnServices;
  let admin = await createAdmin(cp);
  const send = caller(cp);

  // Our resolver: CNAMEs from a table; TXT from the DNS server pebble validates against, unless the test overrides a name.
  const dns = new Resolver({ timeout: 2_000, tries: 1 });
  dns.setServers([pebble.dnsServer]);
  const cnames: Record<string, string[]> = {};
  const txtOverrides: Record<string, string[]> = {};
  app.cdnDomainResolver = {
    cname: async (name) => cnames[name] ?? [],
    txt: async (name) => txtOverrides[name] ?? dns.resolveTxt(name).then((r) => r.map((c) => c.join('')), () => []),
  };

  const { endpoint } = await makeEndpoint(cp, admin);
  const base = `/v1/cdn/endpoints/${endpoint.id}/domains`;
  const row = async (id: string) => (await query<any>(cp, `select * from cdn_custom_domain where id = ?`, [id]))[0];
  const leafOf = (pem: string) => new X509Certificate(pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/)![0]);
  const serialOf = (cert: X509Certificate) => BigInt(`0x${cert.serialNumber}`).toString(16);
  const create = async (hostname: string) => {
    const res = await send(admin, 'POST', base, { hostname, certificate_source: 'managed' });
    t.equal(res.status, 201, res.text);
    return res.body;
  };
  const ids: Record<string, string> = {};

  await t.test('create → DNS-01 records from an ACME order → TXT published → retry-validation → active with a chain from pebble', async (t) => {
    const d = await create('video.example.com');
    ids.video = d.id;
    t.match(d, { certificate_status: 'pending_validation', certificate_expires_at: null, validation_error: null });
    t.match(d.dns_validation, { cname_name: 'video.example.com', cname_value: endpoint.hostname, acme_challenge_name: '_acme-challenge.video.example.com', acme_challenge_value: /^[A-Za-z0-9_-]{43}$/ });
    const stored = await row(d.id);
    t.match(stored.acme_order, { order_url: /^https:\/\/localhost:\d+\//, directory_url: pebble.directoryUrl });
    const [account] = await query<any>(cp, `select * from cdn_acme_account`);
    t.equal(account.directory_url, pebble.directoryUrl);
    t.match(account.account_url, /^https:\/\/localhost:\d+\//, 'the account is registered');
    t.notMatch(account.account_key_sealed, /PRIVATE KEY/, 'the account key is sealed');

    const retryPath = `${base}/${d.id}/retry-validation`;
    const missing = await send(admin, 'POST', retryPath);
    t.equal(missing.status, 200, missing.text);
    t.match(missing.body, { certificate_status: 'pending_validation', validation_error: /CNAME video\.example\.com.*TXT _acme-challenge/ });
    cnames['video.example.com'] = [endpoint.hostname];
    await pebble.setTxt('_acme-challenge.video.example.com', d.dns_validation.acme_challenge_value);
    const active = await send(admin, 'POST', retryPath);
    t.equal(active.status, 200, active.text);
    t.match(active.body, { certificate_status: 'active', validation_error: null });
    const issued = await row(d.id);
    t.equal(issued.certificate_issuer, 'acme');
    t.equal(issued.acme_order, null, 'the order is done');
    const leaf = leafOf(issued.certificate_pem);
    t.equal(active.body.certificate_expires_at, leaf.validToDate.toISOString());
    t.equal(leaf.checkHost('video.example.com'), 'video.example.com', 'the leaf names the hostname');
    const intermediate = new X509Certificate((await pebble.management('intermediates/0')).text);
    t.ok(leaf.checkIssued(intermediate) && leaf.verify(intermediate.publicKey), 'issued and signed by pebble\'s intermediate');
    t.ok(leaf.checkPrivateKey(createPrivateKey(app.secretBox.openString(issued.private_key_sealed, `cdn_custom_domain:${d.id}`))), 'the sealed key is the leaf\'s');
    t.equal((await query(cp, `select 1 from audit_log where action = 'custom_domain.validation_retried' and resource_id = ?`, [d.id])).length, 2);
  });

  await t.test('a TXT value the CA does not see → failed with the reason; the next retry opens a new order with a new value', async (t) => {
    const d = await create('wrong.example.com');
    ids.wrong = d.id;
    const name = '_acme-challenge.wrong.example.com';
    cnames['wrong.example.com'] = [endpoint.hostname];
    await pebble.setTxt(name, 'not-the-value');
    txtOverrides[name] = [d.dns_validation.acme_challenge_value]; // our resolver sees it, the CA's does not
    const retryPath = `${base}/${d.id}/retry-validation`;
    const failed = await send(admin, 'POST', retryPath);
    t.equal(failed.status, 200, failed.text);
    t.match(failed.body, { certificate_status: 'failed', certificate_expires_at: null, validation_error: /retry validation later/ });
    t.ok(failed.body.validation_error.length > 40, `the reason: ${failed.body.validation_error}`);
    t.equal((await row(d.id)).acme_order, null, 'the failed order is dropped');
    delete txtOverrides[name];

    const reopened = await send(admin, 'POST', retryPath);
    t.equal(reopened.status, 200, reopened.text);
    t.equal(reopened.body.certificate_status, 'pending_validation');
    t.not(reopened.body.dns_validation.acme_challenge_value, d.dns_validation.acme_challenge_value, 'a new challenge value');
    t.match(reopened.body.validation_error, new RegExp(`publish TXT ${name.replace(/\./g, '\\.')} = ${reopened.body.dns_validation.acme_challenge_value}`));
    await pebble.setTxt(name, reopened.body.dns_validation.acme_challenge_value);
    const active = await send(admin, 'POST', retryPath);
    t.match(active.body, { certificate_status: 'active', validation_error: null });
  });

  await t.test('the daily job renews through a new ACME order: the new TXT value is shown, the renewal completes once it is published', async (t) => {
    const before = await row(ids.video!);
    await cp.app.jobs.runDue(); // plans the daily schedule from now
    // pebble's certificates follow the real clock; ours jumps to 10 days before this one's expiry.
    clock.advance(new Date(before.certificate_expires_at).getTime() - clock.now().getTime() - 10 * DAY);
    await cp.app.jobs.runDue();
    const waiting = await row(ids.video!);
    t.equal(waiting.certificate_fingerprint, before.certificate_fingerprint, 'the certificate keeps serving');
    t.equal(waiting.certificate_status, 'expiring_soon');
    t.ok(waiting.acme_order, 'a renewal order is open');
    t.not(waiting.dns_validation.acme_challenge_value, before.dns_validation.acme_challenge_value, 'with a new TXT value');
    t.match(waiting.validation_error, /Renewal needs a new ACME challenge: publish TXT _acme-challenge\.video\.example\.com = /);
    t.equal((await query(cp, `select 1 from audit_log where action = 'custom_domain.renewal_challenge_opened' and resource_id = ?`, [ids.video])).length, 1);

    await pebble.setTxt('_acme-challenge.video.example.com', waiting.dns_validation.acme_challenge_value);
    clock.advance(DAY);
    await cp.app.jobs.runDue();
    const renewed = await row(ids.video!);
    t.not(renewed.certificate_fingerprint, before.certificate_fingerprint, 'a new certificate');
    t.equal(renewed.certificate_issuer, 'acme');
    t.equal(renewed.acme_order, null);
    t.equal(renewed.validation_error, null);
    t.equal(leafOf(renewed.certificate_pem).checkHost('video.example.com'), 'video.example.com');
    t.equal((await query(cp, `select 1 from audit_log where action = 'custom_domain.certificate_renewed' and resource_id = ?`, [ids.video])).length, 1);
  });

  await t.test('delete revokes the ACME certificate', async (t) => {
    admin = await createAdmin(cp); // tokens issued before the clock's jump have expired
    const leaf = leafOf((await row(ids.video!)).certificate_pem);
    const res = await send(admin, 'DELETE', `${base}/${ids.video}`);
    t.equal(res.status, 204, res.text);
    const status = JSON.parse((await pebble.management(`cert-status-by-serial/${serialOf(leaf)}`)).text);
    t.equal(status.Status, 'Revoked');
    const [audit] = await query<any>(cp, `select metadata from audit_log where action = 'custom_domain.deleted' and resource_id = ?`, [ids.video]);
    t.equal(audit.metadata.certificate_revoked, true);
  });

  await t.test('pebble unreachable: create answers 201 failed with the reason, retry stays failed, delete still works; no 5xx', async (t) => {
    await pebble.stopAcme();
    const created = await send(admin, 'POST', base, { hostname: 'offline.example.com', certificate_source: 'managed' });
    t.equal(created.status, 201, created.text);
    t.match(created.body, { certificate_status: 'failed', validation_error: /ACME server .* could not be reached/ });
    t.equal(created.body.dns_validation.acme_challenge_value, '', 'no challenge value until an order opens');
    const retried = await send(admin, 'POST', `${base}/${created.body.id}/retry-validation`);
    t.equal(retried.status, 200, retried.text);
    t.match(retried.body, { certificate_status: 'failed', validation_error: /could not be reached/ });
    const deleted = await send(admin, 'DELETE', `${base}/${ids.wrong}`);
    t.equal(deleted.status, 204, 'the domain goes even when its certificate cannot be revoked');
    const [audit] = await query<any>(cp, `select metadata from audit_log where action = 'custom_domain.deleted' and resource_id = ?`, [ids.wrong]);
    t.equal(audit.metadata.certificate_revoked, false);
  });
}
