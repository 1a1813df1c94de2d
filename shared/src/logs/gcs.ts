// The gcs destination: each batch is one object uploaded through Cloud
// Storage's JSON API (POST <base>/upload/storage/v1/b/<bucket>/o?uploadType=media,
// gzip body, ifGenerationMatch=0 so a batch sent again after a lost answer is
// refused with 412 and counted as delivered), authorised by an OAuth access
// token the service account's key obtains (RFC 7523: a JWT signed RS256 with
// its private key, by jose, exchanged at its token_uri; kept until a minute
// before it expires). @google-cloud/storage (14 MB, 91 packages) was weighed
// against this (docs/decisions.md). `endpoint_url` replaces
// https://storage.googleapis.com (an emulator or a private endpoint).
import { importPKCS8, SignJWT } from 'jose';
import { guardedDispatcher, sendRequest, statusError, str, DeliveryError, type Batch, type Destination, type DestinationContext, type DrainSpec, DELIVERY_TIMEOUT_MS } from './destination.ts';
import { objectBody, objectKey } from './object-key.ts';

export const GCS_SCOPE = 'https://www.googleapis.com/auth/devstorage.read_write';
export const DEFAULT_TOKEN_URI = 'https://oauth2.googleapis.com/token';

interface ServiceAccount { client_email: string; private_key: string; private_key_id?: string; token_uri?: string }

export function serviceAccountOf(config: Record<string, unknown>): ServiceAccount {
  const key = JSON.parse(str(config, 'service_account_json') ?? '{}') as ServiceAccount;
  if (typeof key.client_email !== 'string' || typeof key.private_key !== 'string') throw new DeliveryError('the service account key has no client_email or private_key', false);
  return key;
}

export function gcsDestination(drain: DrainSpec, ctx: DestinationContext): Destination {
  const config = drain.destination_config;
  const bucket = str(config, 'bucket')!;
  const base = (str(config, 'endpoint_url') ?? 'https://storage.googleapis.com').replace(/\/+$/, '');
  const timeoutMs = ctx.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  let account: ServiceAccount | null = null;
  const secrets: string[] = [];
  const send = { dispatcher: ctx.dispatcher ?? guardedDispatcher(config.allow_private_network === true, timeoutMs), timeoutMs, secrets };
  let token: { value: string; until: number } | null = null;

  async function accessToken(signal?: AbortSignal): Promise<string> {
    if (token && token.until > Date.now()) return token.value;
    account ??= serviceAccountOf(config);
    // The key, then this exchange's assertion and token (the previous ones are gone with it).
    secrets.splice(0, secrets.length, account.private_key);
    let key: Awaited<ReturnType<typeof importPKCS8>>;
    try {
      key = await importPKCS8(account.private_key, 'RS256');
    } catch {
      throw new DeliveryError('the service account\'s private_key is not an RSA key in PKCS#8 PEM', false);
    }
    const tokenUri = account.token_uri ?? DEFAULT_TOKEN_URI;
    const now = Math.floor(Date.now() / 1000);
    const assertion = await new SignJWT({ scope: GCS_SCOPE })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT', ...(account.private_key_id ? { kid: account.private_key_id } : {}) })
      .setIssuer(account.client_email).setAudience(tokenUri).setIssuedAt(now).setExpirationTime(now + 3600).sign(key);
    secrets.push(assertion);
    const answer = await sendRequest(send, tokenUri, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'edge-agent-logs/1' },
      body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion }).toString(),
    }, signal);
    if (answer.status < 200 || answer.status >= 300) throw statusError('the OAuth token endpoint', answer, secrets);
    let parsed: { access_token?: unknown; expires_in?: unknown };
    try {
      parsed = JSON.parse(answer.text);
    } catch {
      throw new DeliveryError('the OAuth token endpoint answered with something that is not JSON', true);
    }
    if (typeof parsed.access_token !== 'string') throw new DeliveryError('the OAuth token endpoint gave no access_token', true);
    secrets.push(parsed.access_token);
    const lifetime = typeof parsed.expires_in === 'number' ? parsed.expires_in : 3600;
    token = { value: parsed.access_token, until: Date.now() + Math.max(0, lifetime - 60) * 1000 };
    return token.value;
  }

  return {
    lineFormat: drain.log_format,
    async send(batch: Batch, signal?: AbortSignal) {
      const bearer = await accessToken(signal);
      const name = objectKey(str(config, 'prefix'), drain.log_format, ctx.nodeName, batch);
      const url = `${base}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?uploadType=media&ifGenerationMatch=0&name=${encodeURIComponent(name)}`;
      const answer = await sendRequest(send, url, {
        method: 'POST', headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/gzip', 'user-agent': 'edge-agent-logs/1' },
        body: objectBody(drain.log_format, drain.fields, batch),
      }, signal);
      if (answer.status === 412) return; // the object exists: this batch was delivered before
      if (answer.status === 401) token = null;
      if (answer.status < 200 || answer.status >= 300) throw statusError(`Cloud Storage (bucket ${bucket})`, answer, secrets);
    },
  };
}
