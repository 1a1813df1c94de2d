// Cache rules (document 3 §4.4), declared through the shared child-resource operations.
import { CacheRule } from './cdn.entities.ts';
import {
  cacheRuleFilters, cacheRuleRecord, cacheRuleResource, createCacheRuleBody, createTopLevelCacheRuleBody, presentCacheRule, updateCacheRuleBody,
} from './cache-rule-record.ts';
import { cacheRuleService } from './cache-rule-service.ts';
import { childRoutes } from './child-routes.ts';

export const cacheRuleRoutes = childRoutes({
  noun: 'cache rule', segment: 'cache-rules', tag: 'CDN: cache rules',
  entity: CacheRule, record: cacheRuleRecord, resource: cacheRuleResource, present: presentCacheRule,
  sortFields: ['created_at', 'updated_at', 'name', 'priority'],
  filters: cacheRuleFilters,
  where: (q) => (q.enabled !== undefined ? { enabled: q.enabled } : {}),
  createBody: createCacheRuleBody as never, createTopLevelBody: createTopLevelCacheRuleBody as never, updateBody: updateCacheRuleBody,
  rules: 'name, match and ttl_seconds required (top level: distribution_id too). Rules are validated first: an invalid rule is refused with 422 '
    + 'INVALID_CONFIGURATION whose errors give the reason (a path glob that does not compile, a match that states nothing, methods other than GET and HEAD, '
    + 'both include_query_params and exclude_query_params, a key part that is also a bypass condition).',
  service: cacheRuleService,
});
