// The s3 destination: each batch is one object PUT with AWS Signature
// Version 4 (signed by aws4, a small well-kept library: the AWS SDK's S3
// client weighs 22 MB and 26 packages, see docs/decisions.md), gzip-compressed,
// under a time-partitioned key (object-key.ts). AWS is addressed virtual-host
// style (<bucket>.s3.<region>.amazonaws.com); with endpoint_url (MinIO, Ceph,
// R2 and other S3-compatible stores) path style (<endpoint_url>/<bucket>/<key>).
import aws4 from 'aws4';
import { guardedDispatcher, sendRequest, statusError, str, type Batch, type Destination, type DestinationContext, type DrainSpec, DELIVERY_TIMEOUT_MS } from './destination.ts';
import { objectBody, objectKey } from './object-key.ts';

const encodeKey = (key: string) => key.split('/').map(encodeURIComponent).join('/');

export function s3Destination(drain: DrainSpec, ctx: DestinationContext): Destination {
  const config = drain.destination_config;
  const bucket = str(config, 'bucket')!;
  const region = str(config, 'region')!;
  const accessKeyId = str(config, 'access_key_id')!;
  const secretAccessKey = str(config, 'secret_access_key')!;
  const secrets = [accessKeyId, secretAccessKey];
  const endpoint = str(config, 'endpoint_url');
  const base = endpoint ? new URL(endpoint) : new URL(`https://${bucket}.s3.${region}.amazonaws.com`);
  const basePath = endpoint ? `${base.pathname.replace(/\/+$/, '')}/${bucket}` : '';
  const timeoutMs = ctx.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const send = { dispatcher: ctx.dispatcher ?? guardedDispatcher(config.allow_private_network === true, timeoutMs), timeoutMs, secrets };
  return {
    lineFormat: drain.log_format,
    async send(batch: Batch, signal?: AbortSignal) {
      const key = objectKey(str(config, 'prefix'), drain.log_format, ctx.nodeName, batch);
      const body = objectBody(drain.log_format, drain.fields, batch);
      const signed = aws4.sign({
        host: base.host, path: `${basePath}/${encodeKey(key)}`, method: 'PUT', service: 's3', region, body,
        headers: { 'Content-Type': 'application/gzip', 'User-Agent': 'edge-agent-logs/1' },
      }, { accessKeyId, secretAccessKey });
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(signed.headers ?? {})) if (name.toLowerCase() !== 'host') headers[name] = String(value);
      const answer = await sendRequest(send, `${base.protocol}//${base.host}${signed.path}`, { method: 'PUT', headers, body }, signal);
      if (answer.status < 200 || answer.status >= 300) throw statusError(`S3 (bucket ${bucket})`, answer, secrets);
    },
  };
}
