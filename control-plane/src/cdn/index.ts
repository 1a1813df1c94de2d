// The CDN capability (document 3): the working configuration — endpoints
// (distributions), origins, routes and cache rules — and its policies:
// response headers policies, signing keys, IP access rules and log drains. Its start hook provides
// the host lookup the origins' SSRF check uses.
import { CacheRule, CdnRoute, Endpoint, Origin } from './cdn.entities.ts';
import { endpointRoutes } from './endpoint-routes.ts';
import { systemHostLookup } from './origin-host.ts';
import { originRoutes } from './origin-routes.ts';
import { routeRoutes } from './route-routes.ts';
import { cacheRuleRoutes } from './cache-rule-routes.ts';
import { headerPolicyRoutes } from './header-policy-routes.ts';
import { ipRuleRoutes } from './ip-rule-routes.ts';
import { logDrainRoutes } from './log-drain-routes.ts';
import { policyEntities } from './policies.entities.ts';
import { retiredSecretsSweepJob } from './signing-key-jobs.ts';
import { signingKeyRoutes } from './signing-key-routes.ts';

export type { CdnServices } from './services.ts';

export const cdn = {
  name: 'cdn',
  entities: [Endpoint, Origin, CdnRoute, CacheRule, ...policyEntities],
  routes: [...endpointRoutes, ...originRoutes, ...routeRoutes, ...cacheRuleRoutes, ...headerPolicyRoutes, ...ipRuleRoutes, ...signingKeyRoutes, ...logDrainRoutes],
  jobs: [retiredSecretsSweepJob],
  async start() {
    return { services: { cdnHostLookup: systemHostLookup } };
  },
};
