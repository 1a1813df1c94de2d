// The Cache rule record of document 3 §2 and its request bodies; the scalar
// fields' types, ranges and defaults are the edge snapshot's
// (shared/src/config/snapshot.ts cacheRuleSnapshot), read off it.
import { z } from 'zod';
import { cacheRuleSnapshot, MAX_TTL_SECONDS } from '../../../shared/src/config/snapshot.ts';
import { versioned } from '../http/route.ts';
import { orNull, queryBoolean, timestamp, uuid, withExample } from '../http/schemas.ts';
import type { CacheRule } from './cdn.entities.ts';
import { declared, idOf, methodField, nameField, patternField, tokenField } from './fields.ts';

const MAX_ITEMS = 100;
export { MAX_TTL_SECONDS };

const list = (item: z.ZodType<string>) => z.array(item).max(MAX_ITEMS);
const edge = cacheRuleSnapshot.shape;

export const cacheRuleRecord = z.object({
  id: z.uuid(),
  distribution_id: z.uuid(),
  name: z.string(),
  enabled: z.boolean(),
  priority: z.number().int(),
  match: z.object({ paths: z.array(z.string()), methods: z.array(z.string()), content_types: z.array(z.string()) }),
  ttl_seconds: z.number().int(),
  browser_ttl_seconds: orNull(z.number().int()),
  cache_key: z.object({ include_headers: z.array(z.string()), include_query_params: z.array(z.string()), exclude_query_params: z.array(z.string()), include_cookies: z.array(z.string()) }),
  bypass: z.object({ if_cookie_present: z.array(z.string()), if_header_present: z.array(z.string()), if_query_param_present: z.array(z.string()) }),
  stale_while_revalidate_seconds: orNull(z.number().int()),
  stale_if_error_seconds: orNull(z.number().int()),
  negative_ttl_seconds: z.number().int(),
  cache_status_header: z.boolean(),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const cacheRuleResource = versioned(cacheRuleRecord);
export const presentCacheRule = (c: CacheRule) => ({ ...c, distribution_id: idOf(c.distribution)! });

const queryParam = () => z.string().min(1).max(256).regex(/^[^\s&=#]+$/, 'Must be a query parameter name');

const cacheRuleFields = {
  name: nameField(),
  enabled: declared(edge.enabled),
  priority: declared(edge.priority).describe('Lower values are tried first'),
  match: z.strictObject({
    paths: list(patternField()).describe('Path globs (as for routes)'),
    methods: list(methodField()).describe('GET and HEAD only: other responses are never cached'),
    content_types: list(z.string().trim().toLowerCase().regex(/^[a-z0-9!#$&^_.+-]+(\/[a-z0-9!#$&^_.+-]*)?$/, 'Must be a media type or a prefix such as video/ or image/png')),
  }).partial().describe('All stated conditions must match; at least one of paths, methods, content_types'),
  ttl_seconds: edge.ttl_seconds.describe('Edge TTL where the origin gives no explicit freshness'),
  browser_ttl_seconds: declared(edge.browser_ttl_seconds),
  cache_key: z.strictObject({
    include_headers: list(tokenField('header')),
    include_query_params: list(queryParam()).describe('Only these parameters are part of the key (not with exclude_query_params)'),
    exclude_query_params: list(queryParam()),
    include_cookies: list(tokenField('cookie')),
  }).partial().describe('Fewer key parts raise the hit rate but may serve one user\'s variant to another'),
  bypass: z.strictObject({
    if_cookie_present: list(tokenField('cookie')),
    if_header_present: list(tokenField('header')),
    if_query_param_present: list(queryParam()),
  }).partial(),
  stale_while_revalidate_seconds: declared(edge.stale_while_revalidate_seconds),
  stale_if_error_seconds: declared(edge.stale_if_error_seconds),
  negative_ttl_seconds: declared(edge.negative_ttl_seconds).describe('Edge TTL of error answers (4xx, 5xx) the origin gives no explicit freshness for, instead of ttl_seconds '
    + '(0: not cached); default 10, as CloudFront\'s error caching'),
  cache_status_header: declared(edge.cache_status_header).describe('Send Cache-Status (RFC 9211: the edge node\'s region, hit or miss, the remaining TTL) and X-Cache-Status; '
    + 'false sends neither'),
};

const createCacheRuleShape = z.strictObject(cacheRuleFields).partial().required({ name: true, match: true, ttl_seconds: true });
const cacheRuleExample: z.input<typeof createCacheRuleShape> = {
  name: 'Video segments', priority: 10, match: { paths: ['/vod/**/*.m4s', '/vod/**/*.ts'], methods: ['GET', 'HEAD'] },
  ttl_seconds: 86400, browser_ttl_seconds: 3600, cache_key: { exclude_query_params: ['utm_source', 'utm_campaign'] },
  bypass: { if_cookie_present: ['preview_session'] }, stale_while_revalidate_seconds: 60, stale_if_error_seconds: 600,
};
export const createCacheRuleBody = withExample(createCacheRuleShape, cacheRuleExample);
export const createTopLevelCacheRuleBody = withExample(createCacheRuleShape.extend({ distribution_id: uuid().describe('The endpoint the rule belongs to') }),
  { distribution_id: '5e8a1c3f-7b2d-4f6e-a9c0-1d4b7e2f8a36', ...cacheRuleExample });
export const updateCacheRuleBody = withExample(z.strictObject(cacheRuleFields).partial(), { ttl_seconds: 604800, stale_if_error_seconds: 3600 });
export type CacheRuleInput = z.output<typeof updateCacheRuleBody>;

export const cacheRuleFilters = { enabled: queryBoolean().optional() };
