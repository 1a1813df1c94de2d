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
