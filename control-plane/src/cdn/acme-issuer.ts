// Managed certificates through ACME (RFC 8555) with acme-client, when
// ACME_DIRECTORY_URL is set (DESIGN.md §3). DNS-01 only: the order is opened
// when the domain is created (or renewed) so its TXT value can be shown in
// dns_validation; retry-validation has the server check it, then finalizes
// with a CSR for a fresh P-256 key and downloads the chain. One account per
// directory, its key sealed in cdn_acme_account (the first writer wins).
// acme-client talks through one module-wide axios instance: its timeout, retry
// settings and trusted CAs (ACME_CA_BUNDLE) are set on it here, and every
// wait is bounded (per request, and the polling of challenge and order).
import * as acme from 'acme-client';
import { Agent } from 'node:https';
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { RequestContext } from '../core/request-context.ts';
import { SECOND } from '../core/clock.ts';
import { withTimeout } from '../core/timeout.ts';
import { AcmeAccount, type AcmeOrderRef } from './domain-entity.ts';
import { IssuanceError, type CertificateIssuer, type IssuedCertificate } from './certificate-issuer.ts';

/** Each HTTP request to the ACME server. */
export const ACME_REQUEST_TIMEOUT_MS = 10 * SECOND;
/** Revocation when a domain is deleted: best effort, not worth holding the delete longer. */
export const ACME_REVOKE_TIMEOUT_MS = 5 * SECOND;
/** Polling a challenge or order for its final state: attempts with backoff of 250 ms … 2 s (about 15 s in all). */
const POLLING = { backoffAttempts: 10, backoffMin: 250, backoffMax: 2 * SECOND };
const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export interface AcmeSettings { directoryUrl: string; email?: string; caBundle?: string }

/** Bounds a wait that has no cancellation of its own. */
const bounded = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  withTimeout(promise, ms, () => new IssuanceError(`${what} timed out after ${ms / SECOND} s`));

/** The reason shown on the domain for an ACME failure (never a key; at most 300 characters). */
export function describeAcmeError(error: unknown, directoryUrl: string): string {
  if (error instanceof IssuanceError) return error.message;
  const e = error as { code?: string; message?: string; response?: unknown; isAxiosError?: boolean };
  if (e?.isAxiosError && !e.response) return `The ACME server ${directoryUrl} could not be reached (${e.code ?? e.message})`;
  return `The ACME server refused: ${String(e?.message ?? error).replace(/\s+/g, ' ')}`.slice(0, 300);
}

/** Sets acme-client's shared HTTP client: request timeout, one quick retry of 429/5xx answers, the extra trusted CAs. */
type Rejected = (error: { response?: unknown; config?: unknown }) => unknown;
let networkErrorsPassed = false;

function configureHttp(settings: AcmeSettings): void {
  const http = acme.axios as typeof acme.axios & { defaults: { acmeSettings: { retryMaxAttempts: number; retryDefaultDelay: number } } };
  if (!networkErrorsPassed) {
    // acme-client 5.4.0's response interceptor reads error.response.config when a request got no answer (refused, timed
    // out), turning the error into a TypeError that no longer says the server was unreachable: such errors skip it.
    const handler = (http.interceptors.response as unknown as { handlers: { rejected?: Rejected }[] }).handlers[0];
    const original = handler?.rejected;
    if (handler && original) handler.rejected = (error) => (error?.config && !error.response ? Promise.reject(error) : original(error));
    networkErrorsPassed = true;
  }
  http.defaults.timeout = ACME_REQUEST_TIMEOUT_MS;
  http.defaults.acmeSettings.retryMaxAttempts = 1;
  http.defaults.acmeSettings.retryDefaultDelay = 1;
  if (settings.caBundle) http.defaults.httpsAgent = new Agent({ ca: [...rootCertificates, readFileSync(settings.caBundle, 'utf8')] });
}

export function acmeIssuer(box: SecretBox, settings: AcmeSettings): CertificateIssuer {
  configureHttp(settings);
  const { directoryUrl } = settings;
  const aad = `cdn_acme_account:${directoryUrl}`;
  let client: acme.Client | undefined;

  /** The account's client: the key made and sealed once per directory, the account registered once. */
  async function account(rc: RequestContext): Promise<acme.Client> {
    if (client) return client;
    let row = await rc.em.findOne(AcmeAccount, directoryUrl, { refresh: true });
    if (!row) {
      const key = (await acme.crypto.createPrivateEcdsaKey('P-256')).toString();
      await rc.em.execute(
        `insert into cdn_acme_account (directory_url, account_key_sealed, account_url, created_at) values (?, ?, null, ?) on conflict (directory_url) do nothing`,
        [directoryUrl, box.seal(key, aad), new Date()],
      );
      row = await rc.em.findOneOrFail(AcmeAccount, directoryUrl, { refresh: true });
    }
    const made = new acme.Client({ directoryUrl, accountKey: box.openString(row.account_key_sealed, aad), ...(row.account_url ? { accountUrl: row.account_url } : {}), ...POLLING });
    if (!row.account_url) {
      // newAccount with a known key answers the existing account, so racing replicas end with one.
      await made.createAccount({ termsOfServiceAgreed: true, ...(settings.email ? { contact: [`mailto:${settings.email}`] } : {}) });
      await rc.em.execute(`update cdn_acme_account set account_url = ? where directory_url = ?`, [made.getAccountUrl(), directoryUrl]);
    }
    client = made;
    return made;
  }

  async function dnsChallenge(c: acme.Client, order: acme.Order, hostname: string) {
    const authz = (await c.getAuthorizations(order)).find((a) => a.identifier.value === hostname);
    const challenge = authz?.challenges.find((ch) => ch.type === 'dns-01');
    if (!authz || !challenge) throw new IssuanceError(`The ACME server offers no DNS-01 challenge for ${hostname}`, true);
    return { authz, challenge };
  }

  return {
    kind: 'acme',

    async startValidation(rc, hostname) {
      try {
        const c = await account(rc);
        const order = await c.createOrder({ identifiers: [{ type: 'dns', value: hostname }] });
        const { authz, challenge } = await dnsChallenge(c, order, hostname);
        const ref: AcmeOrderRef = { order_url: order.url, authorization_url: authz.url, challenge_url: challenge.url, directory_url: directoryUrl };
        return { value: await c.getChallengeKeyAuthorization(challenge), order: ref, ready: order.status === 'ready' || authz.status === 'valid' };
      } catch (error) {
        throw error instanceof IssuanceError ? error : new IssuanceError(describeAcmeError(error, directoryUrl));
      }
    },

    async issue(rc, hostname, _now, ref): Promise<IssuedCertificate> {
      if (!ref || ref.directory_url !== directoryUrl) throw new IssuanceError('No ACME order is open for this domain; retry validation to open one', true);
      let c: acme.Client;
      let order: acme.Order;
      try {
        c = await account(rc);
        order = await c.getOrder({ url: ref.order_url } as acme.Order);
      } catch (error) {
        throw new IssuanceError(describeAcmeError(error, directoryUrl));
      }
      try {
        if (order.status === 'pending') {
          const { challenge } = await dnsChallenge(c, order, hostname);
          if (challenge.status === 'pending') await c.completeChallenge(challenge);
          await c.waitForValidStatus(challenge);
          order = { ...(await c.waitForValidStatus(order)), url: order.url }; // its answer has no url
        }
        if (order.status === 'invalid') throw new IssuanceError('The ACME order is invalid (its validation failed or it expired)', true);
        const key = await acme.crypto.createPrivateEcdsaKey('P-256');
        if (order.status === 'ready') {
          const [, csr] = await acme.crypto.createCsr({ commonName: hostname, altNames: [hostname] }, key);
          order = await c.finalizeOrder(order, csr);
        }
        const chain = (await c.getCertificate(order)).match(PEM_BLOCK) ?? [];
        if (!chain.length) throw new IssuanceError('The ACME server returned no certificate', true);
        const leaf = new X509Certificate(chain[0]!);
        return {
          chainPem: chain.map((pem) => new X509Certificate(pem).toString()).join(''),
          keyPem: key.toString(),
          expiresAt: leaf.validToDate,
          fingerprint: leaf.fingerprint256,
          issuer: 'acme',
        };
      } catch (error) {
        if (error instanceof IssuanceError) throw error;
        const e = error as { isAxiosError?: boolean; response?: unknown };
        // An answer from the server (a failed challenge, a refused order) ends the order; a network failure leaves it open.
        throw new IssuanceError(describeAcmeError(error, directoryUrl), !(e?.isAxiosError && !e.response));
      }
    },

    async revoke(rc, chainPem) {
      const leaf = chainPem.match(PEM_BLOCK)?.[0];
      if (!leaf) return;
      await bounded((async () => (await account(rc)).revokeCertificate(leaf))(), ACME_REVOKE_TIMEOUT_MS, 'Revocation');
    },
  };
}
