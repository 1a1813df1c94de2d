// The daily certificate check (document 3 §2 certificate_status; DESIGN.md §3
// "certificate checks"): managed certificates within EXPIRING_SOON_MS of
// expiry are renewed (a failed renewal leaves them expiring_soon, then
// expired, and is retried the next day); custom ones move to expiring_soon and
// expired by date; superseded certificates past their overlap are dropped.
// Each status change is audit-logged under the system actor.
import { z } from 'zod';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { jobsFor } from '../jobs/index.ts';
import { EXPIRING_SOON_MS, statusByExpiry } from './certificate-check.ts';
import { CustomDomain } from './domain-entity.ts';
import { renewManaged } from './domain-service.ts';
import type { CdnServices } from './services.ts';

const defineJob = jobsFor<CdnServices>();

export interface CertificateCheckSummary { renewed: number; expiring_soon: number; expired: number; overlaps_ended: number }

export async function checkCertificates(app: CdnServices, rc: RequestContext): Promise<CertificateCheckSummary> {
  const now = app.clock.now();
  const summary: CertificateCheckSummary = { renewed: 0, expiring_soon: 0, expired: 0, overlaps_ended: 0 };
  const due = await rc.em.find(CustomDomain, {
    $or: [
      { certificate_status: { $in: ['active', 'expiring_soon'] }, certificate_expires_at: { $lte: new Date(now.getTime() + EXPIRING_SOON_MS) } },
      { previous_retires_at: { $lte: now } },
    ],
  }, { orderBy: { certificate_expires_at: 'asc' } });
  for (const domain of due) {
    if (domain.previous_retires_at && domain.previous_retires_at <= now) {
      domain.previous_certificate_pem = null;
      domain.previous_private_key_sealed = null;
      domain.previous_retires_at = null;
      summary.overlaps_ended++;
    }
    if (!domain.certificate_expires_at || !['active', 'expiring_soon'].includes(domain.certificate_status)) continue;
    const before = { certificate_status: domain.certificate_status, certificate_expires_at: domain.certificate_expires_at, certificate_fingerprint: domain.certificate_fingerprint };
    if (domain.certificate_source === 'managed' && statusByExpiry(domain.certificate_expires_at, now) !== 'active') await renewManaged(app, rc, domain);
    const status = statusByExpiry(domain.certificate_expires_at, now);
    if (status !== 'active' || domain.certificate_status !== 'active') domain.certificate_status = status;
    const after = { certificate_status: domain.certificate_status, certificate_expires_at: domain.certificate_expires_at, certificate_fingerprint: domain.certificate_fingerprint };
    const changes = changesOf(before, after);
    if (Object.keys(changes).length === 0) continue;
    const renewed = after.certificate_fingerprint !== before.certificate_fingerprint;
    if (renewed) summary.renewed++;
    else if (status === 'expired') summary.expired++;
    else summary.expiring_soon++;
    recordAudit(rc, {
      action: renewed ? 'custom_domain.certificate_renewed' : `custom_domain.certificate_${status}`,
      resource_type: 'custom_domain', resource_id: domain.id, changes,
    });
  }
  await rc.em.flush();
  return summary;
}

export const certificateCheckJob = defineJob({
  type: 'cdn.certificate-check',
  payload: z.object({}),
  recurring: { cron: '17 3 * * *' },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    const summary = await checkCertificates(app, rc);
    if (summary.renewed || summary.expiring_soon || summary.expired || summary.overlaps_ended) rc.log.info(summary, 'certificate check');
  },
});
