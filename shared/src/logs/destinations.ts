// The destination client of a drain, by destination_type (one file per type).
import { datadogDestination } from './datadog.ts';
import type { Destination, DestinationContext, DrainSpec } from './destination.ts';
import { elasticsearchDestination } from './elasticsearch.ts';
import { gcsDestination } from './gcs.ts';
import { httpDestination } from './http.ts';
import { s3Destination } from './s3.ts';

export function createDestination(drain: DrainSpec, ctx: DestinationContext): Destination {
  switch (drain.destination_type) {
    case 'http': return httpDestination(drain, ctx);
    case 'elasticsearch': return elasticsearchDestination(drain, ctx);
    case 'datadog': return datadogDestination(drain, ctx);
    case 's3': return s3Destination(drain, ctx);
    case 'gcs': return gcsDestination(drain, ctx);
  }
}
