// The elasticsearch destination: each batch is one request to the bulk API
// (POST <url>/_bulk, NDJSON: an action line, then the document, per record).
// Documents are the record's JSON; the action is `create` with the record's
// request id as _id, so a batch sent again after a lost answer adds nothing
// (those items answer 409, counted as delivered). The index may name the
// record's UTC date: {yyyy}, {mm}, {dd} and {hh} (e.g. cdn-logs-{yyyy}.{mm}.{dd}).
// Authentication: basic (username and password) or an API key.
import { batchLines, errorCode, guardedDispatcher, safeText, sendRequest, statusError, str, DeliveryError, type Batch, type Destination, type DestinationContext, type DrainSpec, DELIVERY_TIMEOUT_MS } from './destination.ts';

/** The placeholders an index may hold. */
export const INDEX_PLACEHOLDERS = /\{(yyyy|mm|dd|hh)\}/g;

/** The index for a record time: the placeholders filled from its UTC date. */
export function indexFor(pattern: string, ms: number): string {
  if (!pattern.includes('{')) return pattern;
  const iso = new Date(ms).toISOString();
  return pattern.replace(INDEX_PLACEHOLDERS, (_, p: string) => (p === 'yyyy' ? iso.slice(0, 4) : p === 'mm' ? iso.slice(5, 7) : p === 'dd' ? iso.slice(8, 10) : iso.slice(11, 13)));
}

interface BulkItem { status?: number; error?: { type?: string; reason?: string } }

export function elasticsearchDestination(drain: DrainSpec, ctx: DestinationContext): Destination {
  const config = drain.destination_config;
  const base = str(config, 'url')!.replace(/\/+$/, '');
  const pattern = str(config, 'index')!;
  const headers: Record<string, string> = { 'content-type': 'application/x-ndjson', 'user-agent': 'edge-agent-logs/1' };
  const secrets: string[] = [];
  const apiKey = str(config, 'api_key');
  const username = str(config, 'username');
  const password = str(config, 'password');
  if (apiKey !== undefined) {
    headers.authorization = `ApiKey ${apiKey}`;
    secrets.push(apiKey);
  } else if (username !== undefined && password !== undefined) {
    headers.authorization = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
    secrets.push(password, `${username}:${password}`);
  }
  const timeoutMs = ctx.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const send = { dispatcher: ctx.dispatcher ?? guardedDispatcher(config.allow_private_network === true, timeoutMs), timeoutMs, secrets };
  return {
    lineFormat: 'ndjson',
    needsIds: true,
    async send(batch: Batch, signal?: AbortSignal) {
      const lines = batchLines(batch);
      const parts: string[] = [];
      for (let i = 0; i < lines.length; i++) {
        parts.push(`{"create":{"_index":${JSON.stringify(indexFor(pattern, batch.times[i]!))},"_id":${JSON.stringify(batch.ids[i]!)}}}\n${lines[i]}\n`);
      }
      const body = parts.join('');
      const answer = await sendRequest(send, `${base}/_bulk`, { method: 'POST', headers, body }, signal);
      if (answer.status < 200 || answer.status >= 300) throw statusError('Elasticsearch', answer, secrets);
      let parsed: { errors?: boolean; items?: Record<string, BulkItem>[] };
      try {
        parsed = JSON.parse(answer.text);
      } catch {
        throw new DeliveryError('Elasticsearch answered the bulk request with something that is not JSON', true);
      }
      if (!parsed.errors) return;
      // An item already there (409: a batch sent again) is delivered; throttling or a node failure is worth a retry of
      // the batch (its delivered items answer 409 next time); anything else (a mapping error) will not get better.
      let retry: BulkItem | null = null;
      let refused: BulkItem | null = null;
      for (const entry of parsed.items ?? []) {
        const item = Object.values(entry)[0] ?? {};
        const status = item.status ?? 0;
        if (status < 300 || status === 409) continue;
        if (status === 429 || status >= 500) retry ??= item;
        else refused ??= item;
      }
      // Its error type only: the reason is the receiver's free text (it may echo what it was sent).
      const describe = (item: BulkItem) => safeText(`Elasticsearch refused a document (${item.status}${errorCode(item.error?.type) ? ` ${item.error!.type}` : ''})`, secrets);
      if (retry) throw new DeliveryError(describe(retry), true);
      if (refused) throw new DeliveryError(describe(refused), false);
    },
  };
}
