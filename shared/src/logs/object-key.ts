// Object keys of the object-store destinations (s3, gcs): one gzip object per
// batch under the drain's prefix, partitioned by the UTC hour of the batch's
// first record, named after the node and the batch id (kept across retries,
// so a batch sent again replaces the same object rather than adding one).
import { gzipSync } from 'node:zlib';
import { frameBody, type LogFormat } from './access-record.ts';
import type { Batch } from './destination.ts';

const EXTENSIONS: Record<LogFormat, string> = { json: 'json', ndjson: 'ndjson', w3c_extended: 'log' };

/** `<prefix>/<yyyy>/<mm>/<dd>/<hh>/<node>-<batch id>.<ext>.gz` (a prefix that does not end in / gets one). */
export function objectKey(prefix: string | undefined, format: LogFormat, nodeName: string, batch: Batch): string {
  const iso = new Date(batch.times[0] ?? Date.now()).toISOString();
  const dir = prefix ? (prefix.endsWith('/') ? prefix : `${prefix}/`) : '';
  const node = nodeName.replace(/[^A-Za-z0-9._-]/g, '_');
  return `${dir}${iso.slice(0, 4)}/${iso.slice(5, 7)}/${iso.slice(8, 10)}/${iso.slice(11, 13)}/${node}-${batch.id}.${EXTENSIONS[format]}.gz`;
}

/** The batch as the object's bytes: framed in the drain's format, gzip-compressed. */
export function objectBody(format: LogFormat, fields: readonly string[], batch: Batch): Buffer {
  return gzipSync(frameBody(format, fields, batch.body, batch.times[0]));
}
