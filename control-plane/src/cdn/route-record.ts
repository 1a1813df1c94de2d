// The Route record of document 3 §2 and its request bodies; defaults as the
// edge snapshot's (shared/src/config/snapshot.ts routeSnapshot).
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { orNull, queryBoolean, timestamp, uuid, withExample } from '../http/schemas.ts';
import type { CdnRoute } from './cdn.entities.ts';
import { routeSnapshot } from '../../../shared/src/config/snapshot.ts';
import { declared, idOf, methodField, nameField, patternField } from './fields.ts';
import { REDIRECT_STATUSES, REDIRECT_TYPES } from '../../../shared/src/match/redirect.ts';

const MAX_PATTERNS = 100;
const edge = routeSnapshot.shape;

const matchRecord = z.object({ hosts: z.array(z.string()), paths: z.array(z.string()), methods: z.array(z.string()) });
const redirectRecord = z.object({ type: z.string(), status_code: z.number().int(), match_path: z.string(), redirect_to: z.string() });

export const routeRecord = z.object({
  id: z.uuid(),
  distribution_id: z.uuid(),
  name: z.string(),
  origin_id: z.uuid(),
  enabled: z.boolean(),
  priority: z.number().int(),
  match: matchRecord,
  strip_prefix: orNull(z.string()),
  response_headers_policy_id: orNull(z.uuid()),
  redirect_rules: z.array(redirectRecord),
  compression_enabled: orNull(z.boolean()),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const routeResource = versioned(routeRecord);
export const presentRoute = (r: CdnRoute) => ({ ...r, distribution_id: idOf(r.distribution)!, origin_id: idOf(r.origin)! });

const matchInput = z.strictObject({
  hosts: z.array(patternField(255)).max(MAX_PATTERNS).describe('Host names; "*.example.com" matches any subdomain, "*" every host'),
  paths: z.array(patternField()).max(MAX_PATTERNS).describe('Path globs: * within a segment, ** across, ? one character, {a,b}; "/videos/*" covers everything below'),
  methods: z.array(methodField()).max(7),
}).partial();

const redirectInput = z.strictObject({
  type: z.enum(REDIRECT_TYPES).describe('http_to_https: to the same URL over https; path: to redirect_to'),
  status_code: z.union(REDIRECT_STATUSES.map((s) => z.literal(s)) as never as [z.ZodLiteral<301>, z.ZodLiteral<302>]).default(301),
  match_path: patternField().default('/*').describe('A path glob whose wildcards capture, from the left: * within a segment, ** and a trailing /* across '
    + 'segments, ? one character; {a,b} and [..] match without capturing'),
  redirect_to: z.string().trim().max(2048).default('').describe('For type path: an absolute path or http(s) URL; $1…$9 insert what the wildcards of match_path matched'),
}).superRefine((rule, ctx) => {
  if (rule.type === 'path' && !/^(\/|https?:\/\/)\S*$/.test(rule.redirect_to)) {
    ctx.addIssue({ code: 'custom', path: ['redirect_to'], message: 'Required for type path: an absolute path or an http(s) URL' });
  }
  if (rule.type === 'http_to_https' && rule.redirect_to !== '') ctx.addIssue({ code: 'custom', path: ['redirect_to'], message: 'Must be empty for http_to_https' });
});

const routeFields = {
  name: nameField(),
  origin_id: uuid().describe('An origin of the same distribution (or of none: it then joins it); enabled while the route is'),
  enabled: declared(edge.enabled),
  priority: declared(edge.priority).describe('Lower values are tried first'),
  match: matchInput.describe('All stated conditions must match (AND); at least one of hosts, paths, methods'),
  strip_prefix: z.string().max(2048).regex(/^\/\S*$/, 'Must be an absolute path such as /api').nullable(),
  response_headers_policy_id: uuid().nullable().describe('The response headers policy of the answers to requests this route matches, replacing the '
    + 'endpoint\'s (not merged with it); null uses the endpoint\'s. Must name an existing policy (422)'),
  redirect_rules: z.array(redirectInput).max(50).describe('Answered by the edge itself, after the IP rules, geo restriction and signed-URL checks and '
    + 'before the cache, for requests this route matches: the first rule in order whose match_path matches the path answers. http_to_https: a viewer not '
    + 'on TLS gets status_code and the same URL on https; path: status_code and Location redirect_to with $1…$9 filled in, plus the query as sent when '
    + 'redirect_to has none. A rule the edge could not answer is refused with 422 by the edge\'s own compiler ($n naming no wildcard or placed in a '
    + 'URL\'s host, wildcards inside {…})'),
  compression_enabled: declared(edge.compression_enabled).describe('true or false overrides the endpoint\'s compression.enabled for requests this route matches '
    + '(with the endpoint\'s algorithms and min_size_bytes); null follows the endpoint'),
};

const createRouteShape = z.strictObject(routeFields).partial().required({ name: true, origin_id: true, match: true });
const routeExample: z.input<typeof createRouteShape> = {
  name: 'Live streams', origin_id: '9c2e5b7a-1f4d-4a8e-b3c6-0d7f2e9a5b81', priority: 10,
  match: { paths: ['/live/**'], methods: ['GET', 'HEAD'] }, strip_prefix: '/live',
  redirect_rules: [{ type: 'path', status_code: 301, match_path: '/live/old/*', redirect_to: '/live/$1' }],
};
export const createRouteBody = withExample(createRouteShape, routeExample);
export const createTopLevelRouteBody = withExample(createRouteShape.extend({
  distribution_id: uuid().optional().describe('Left out: the distribution of origin_id'),
}), routeExample);
export const updateRouteBody = withExample(z.strictObject(routeFields).partial(), { priority: 5, match: { paths: ['/live/**', '/events/**'] } });
export type RouteInput = z.output<typeof updateRouteBody>;

export const routeFilters = { origin_id: uuid().optional(), enabled: queryBoolean().optional() };
