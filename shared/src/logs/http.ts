// The http destination: each batch is one POST of the drain's format (json
// array, ndjson lines or a W3C log file) with the configured headers, the
// Authorization header from auth_header, and X-Batch-Id (kept across retries,
// so a receiver can drop a batch it already has).
import { frameBody, formatMediaType } from './access-record.ts';
import { guardedDispatcher, sendRequest, statusError, str, type Batch, type Destination, type DestinationContext, type DrainSpec, DELIVERY_TIMEOUT_MS } from './destination.ts';

export function httpDestination(drain: DrainSpec, ctx: DestinationContext): Destination {
  const config = drain.destination_config;
  const url = str(config, 'url')!;
  const headers: Record<string, string> = {};
  const secrets: string[] = [];
  for (const [name, value] of Object.entries((config.headers ?? {}) as Record<string, string>)) {
    headers[name.toLowerCase()] = value;
    secrets.push(value);
  }
  const auth = str(config, 'auth_header');
  if (auth !== undefined) {
    headers.authorization = auth;
    secrets.push(auth);
  }
  headers['content-type'] = formatMediaType(drain.log_format);
  const timeoutMs = ctx.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const send = { dispatcher: ctx.dispatcher ?? guardedDispatcher(config.allow_private_network === true, timeoutMs), timeoutMs, secrets };
  return {
    lineFormat: drain.log_format,
    async send(batch: Batch, signal?: AbortSignal) {
      const body = frameBody(drain.log_format, drain.fields, batch.body);
      const answer = await sendRequest(send, url, { method: 'POST', headers: { ...headers, 'x-batch-id': batch.id, 'user-agent': 'edge-agent-logs/1' }, body }, signal);
      if (answer.status < 200 || answer.status >= 300) throw statusError('the receiver', answer, secrets);
    },
  };
}
