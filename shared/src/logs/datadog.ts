// The datadog destination: Datadog's HTTP log intake (POST
// https://http-intake.logs.<site>/api/v2/logs, header DD-API-KEY, a JSON array
// of log entries, gzip-encoded). Each entry's message is the record rendered
// in the drain's format (json and ndjson lines are JSON, which Datadog parses
// into attributes), with ddsource, service and the edge node as hostname.
// `url` replaces the site's intake (a Datadog agent or a pipeline that speaks
// the intake protocol). The intake takes at most 1,000 entries and 5 MB per
// request: the drain's batches stay below both.
import { gzipSync } from 'node:zlib';
import { batchLines, guardedDispatcher, sendRequest, statusError, str, type Batch, type Destination, type DestinationContext, type DrainSpec, DELIVERY_TIMEOUT_MS } from './destination.ts';

export const DATADOG_MAX_ENTRIES = 1000;

export function datadogIntakeUrl(config: Record<string, unknown>): string {
  return str(config, 'url') ?? `https://http-intake.logs.${str(config, 'site') ?? 'datadoghq.com'}/api/v2/logs`;
}

export function datadogDestination(drain: DrainSpec, ctx: DestinationContext): Destination {
  const config = drain.destination_config;
  const url = datadogIntakeUrl(config);
  const apiKey = str(config, 'api_key')!;
  const secrets = [apiKey];
  const prefix = `{"ddsource":${JSON.stringify(str(config, 'source') ?? 'cdn')},"service":${JSON.stringify(str(config, 'service') ?? 'cdn-edge')},"hostname":${JSON.stringify(ctx.nodeName)},"message":`;
  const timeoutMs = ctx.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const send = { dispatcher: ctx.dispatcher ?? guardedDispatcher(config.allow_private_network === true, timeoutMs), timeoutMs, secrets };
  return {
    lineFormat: drain.log_format,
    async send(batch: Batch, signal?: AbortSignal) {
      const body = `[${batchLines(batch).map((line) => `${prefix}${JSON.stringify(line)}}`).join(',')}]`;
      const answer = await sendRequest(send, url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', 'dd-api-key': apiKey, 'user-agent': 'edge-agent-logs/1' },
        body: gzipSync(body),
      }, signal);
      if (answer.status < 200 || answer.status >= 300) throw statusError('Datadog', answer, secrets);
    },
  };
}
