// The custom domains' certificates for Prometheus: how many expire when, by
// source (managed: renewed by the daily check 30 days before expiry, so one
// within 30 days means its renewal failed; custom: the customer uploads the
// next one). Read from the database at scrape time, the same on every replica.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { DAY, type Clock } from '../core/clock.ts';
import { queryGauge } from '../core/query-gauge.ts';
import { EXPIRING_SOON_MS } from './certificate-check.ts';
import { CERTIFICATE_SOURCES } from './domain-entity.ts';

/** Disjoint windows: past (expired), within_7d, within_30d (8 to 30 days: the API's expiring_soon), later. */
export const EXPIRY_WINDOWS = ['past', 'within_7d', 'within_30d', 'later'] as const;

export function certificateGauge(em: () => EntityManager, clock: Clock, log: Logger) {
  return queryGauge({
    name: 'cdn_certificates',
    help: 'Certificates of custom domains in service, by source (managed, custom) and when they expire (past, within_7d, within_30d: 8-30 days, later)',
    labelNames: ['source', 'expires'] as const,
    declared: CERTIFICATE_SOURCES.flatMap((source) => EXPIRY_WINDOWS.map((expires) => ({ source, expires }))),
    log,
    load: async () => {
      const now = clock.now().getTime();
      const rows = await em().execute<{ source: string; expires: string; n: number }[]>(
        `select certificate_source as source,
           case when certificate_expires_at <= ? then 'past' when certificate_expires_at <= ? then 'within_7d'
                when certificate_expires_at <= ? then 'within_30d' else 'later' end as expires,
           count(*)::float8 as n
         from cdn_custom_domain
         where certificate_expires_at is not null and certificate_status in ('active', 'expiring_soon', 'expired')
         group by 1, 2`,
        [new Date(now), new Date(now + 7 * DAY), new Date(now + EXPIRING_SOON_MS)],
      );
      return rows.map((row) => ({ labels: { source: row.source, expires: row.expires }, value: row.n }));
    },
  });
}
