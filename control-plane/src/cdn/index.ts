// The CDN capability (document 3): the working configuration — endpoints
// (distributions), origins, routes and cache rules — its policies (response
// headers policies, signing keys, IP access rules and log drains), purges,
// prefetch jobs and custom domains with their certificates. Its start hook
// provides the host lookup the origins' SSRF check uses, the DNS resolver of
// managed-certificate validation and the certificate issuer (ACME when
// ACME_DIRECTORY_URL is set, otherwise the internal CA).
import { CacheRule, CdnRoute, Endpoint, Origin } from './cdn.entities.ts';
import { endpointRoutes } from './endpoint-routes.ts';
import { systemHostLookup } from './origin-host.ts';
import { originRoutes } from './origin-routes.ts';
import { routeRoutes } from './route-routes.ts';
import { cacheRuleRoutes } from './cache-rule-routes.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Registry } from 'prom-client';
import type { CoreServices } from '../core/services.ts';
import { AcmeAccount, CustomDomain, InternalCa } from './domain-entity.ts';
import { PrefetchJob, PurgeRequest } from './purge-entity.ts';
import { certificateCheckJob } from './certificate-job.ts';
import { certificateGauge } from './certificate-metrics.ts';
import { domainRoutes } from './domain-routes.ts';
import { headerPolicyRoutes } from './header-policy-routes.ts';
import { internalCaIssuer } from './certificate-issuer.ts';
import { ipRuleRoutes } from './ip-rule-routes.ts';
import { logDrainRoutes } from './log-drain-routes.ts';
import { policyEntities } from './policies.entities.ts';
import { prefetchRoutes } from './prefetch-routes.ts';
import { purgeRoutes } from './purge-routes.ts';
import { retiredSecretsSweepJob } from './signing-key-jobs.ts';
import { signingKeyRoutes } from './signing-key-routes.ts';
import { systemDomainResolver } from './domain-dns.ts';
import { trustStore } from './certificate-trust.ts';

export type { CdnServices } from './services.ts';

export const cdn = {
  name: 'cdn',
  entities: [Endpoint, Origin, CdnRoute, CacheRule, ...policyEntities, PurgeRequest, PrefetchJob, CustomDomain, InternalCa, AcmeAccount],
  routes: [...endpointRoutes, ...originRoutes, ...routeRoutes, ...cacheRuleRoutes, ...headerPolicyRoutes, ...ipRuleRoutes, ...signingKeyRoutes, ...purgeRoutes, ...prefetchRoutes, ...domainRoutes, ...logDrainRoutes],
  jobs: [retiredSecretsSweepJob, certificateCheckJob],
  async start(services: CoreServices) {
    const { ACME_DIRECTORY_URL: directoryUrl, ACME_EMAIL: email, ACME_CA_BUNDLE: caBundle } = services.config;
    // acme-client is loaded only where an ACME directory is configured.
    const issuer = directoryUrl
      ? (await import('./acme-issuer.ts')).acmeIssuer(services.secretBox, { directoryUrl, email, caBundle })
      : internalCaIssuer(services.secretBox);
    const certificates = certificateGauge(() => services.db.orm.em.fork() as EntityManager, services.clock, services.log.child({ component: 'cdn' }));
    return {
      services: {
        cdnHostLookup: systemHostLookup, cdnDomainResolver: systemDomainResolver(), cdnCertificateIssuer: issuer,
        cdnCertificateTrust: trustStore({ caFile: services.config.CUSTOM_CERT_CA_FILE }),
      },
      metrics: (registry: Registry) => registry.registerMetric(certificates),
    };
  },
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { PREFETCH_SUBMITTED_CHANNEL, PURGE_SUBMITTED_CHANNEL } from './announcements.ts';
export { createCacheRuleBody } from './cache-rule-record.ts';
export { cacheRuleService, ruleProblems } from './cache-rule-service.ts';
export { type CacheRule, type CdnRoute, Endpoint, HEALTH_STATUSES, type HealthStatus, Origin } from './cdn.entities.ts';
export { keyAad } from './domain-service.ts';
export { createEndpointBody } from './endpoint-record.ts';
export { createEndpoint, setEndpointEnabled } from './endpoint-service.ts';
export { idParams, type ListOptions } from './fields.ts';
export { drainSecrets } from './log-drain-service.ts';
export { systemHostLookup } from './origin-host.ts';
export { createOriginBody, updateOriginBody } from './origin-record.ts';
export { createOrigin, findOrigin, type OriginWriteServices, setOriginEnabled, updateOrigin } from './origin-service.ts';
export { type LogDrain, type SigningKey } from './policies.entities.ts';
export { ADMITTING_ACTIONS } from './policy-checks.ts';
export { type FailedUrl, PrefetchJob, PurgeRequest } from './purge-entity.ts';
export { matchProblems, redirectProblems } from './route-service.ts';
export { type OriginHealthReading } from './services.ts';
export { signingSecrets } from './signing-key-service.ts';
export { cacheRuleFields, customDomainFields, endpointFields, headerPolicyFields, ipRuleFields, logDrainFields, originFields, type ResourceFields, routeFields, selectList, signingKeyFields, sortedKeys, toEntry } from './snapshot-fields.ts';
export { restoreSnapshot } from './snapshot-restore.ts';
