// Routes (document 3 §4.3), declared through the shared child-resource operations.
import { CdnRoute } from './cdn.entities.ts';
import { childRoutes } from './child-routes.ts';
import { createRouteBody, createTopLevelRouteBody, presentRoute, routeFilters, routeRecord, routeResource, updateRouteBody } from './route-record.ts';
import { routeService } from './route-service.ts';

export const routeRoutes = childRoutes({
  noun: 'route', segment: 'routes', tag: 'CDN: routes',
  entity: CdnRoute, record: routeRecord, resource: routeResource, present: presentRoute,
  sortFields: ['created_at', 'updated_at', 'name', 'priority'],
  filters: routeFilters,
  where: (q) => ({ ...(q.origin_id ? { origin: q.origin_id } : {}), ...(q.enabled !== undefined ? { enabled: q.enabled } : {}) }),
  createBody: createRouteBody as never, createTopLevelBody: createTopLevelRouteBody as never, updateBody: updateRouteBody,
  rules: 'name, origin_id and match required (priority defaults to 100, enabled to true). Refused with 422 INVALID_CONFIGURATION when origin_id names a missing '
    + 'origin, one of another distribution, or a disabled one while the route is enabled; when a host pattern, path glob or redirect rule does not compile '
    + '(redirect rules by the edge\'s own compiler: a $n that names no wildcard of match_path or stands in a URL\'s host) or match states no condition; '
    + 'or when response_headers_policy_id names a policy that does not exist. The edge answers redirect_rules itself (see the field).',
  service: routeService,
});
