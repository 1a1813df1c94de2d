// Cache rules, document 3 §4.4: validated before they are stored; an invalid
// rule is a 422 INVALID_CONFIGURATION whose errors say why: a path glob the
// edge cannot compile, a match that states nothing, methods other than GET and
// HEAD (nothing else is cached), a key that both includes and excludes query
// parameters, a key part that is also a bypass condition.
import type { FieldError } from '../http/errors.ts';
import { pathGlobProblem } from '../../../shared/src/match/glob.ts';
import { cacheRuleSnapshot } from '../../../shared/src/config/snapshot.ts';
import { CacheRule, type CacheBypass, type CacheKey, type CacheRuleMatch } from './cdn.entities.ts';
import type { CacheRuleInput } from './cache-rule-record.ts';
import { childService, patternProblems } from './child-service.ts';
import { merged } from './fields.ts';

const EMPTY_MATCH: CacheRuleMatch = { paths: [], methods: [], content_types: [] };
const EMPTY_KEY: CacheKey = { include_headers: [], include_query_params: [], exclude_query_params: [], include_cookies: [] };
const EMPTY_BYPASS: CacheBypass = { if_cookie_present: [], if_header_present: [], if_query_param_present: [] };
const CACHEABLE = new Set(['GET', 'HEAD']);

export function ruleProblems(rule: Pick<CacheRule, 'match' | 'cache_key' | 'bypass'>): FieldError[] {
  const { match, cache_key: key } = rule;
  const problems = patternProblems('match.paths', match.paths, pathGlobProblem);
  if (!match.paths.length && !match.methods.length && !match.content_types.length) {
    problems.push({ field: 'match', message: 'Must state at least one of paths, methods, content_types' });
  }
  match.methods.forEach((m, i) => {
    if (!CACHEABLE.has(m)) problems.push({ field: `match.methods[${i}]`, message: `${m} responses are never cached: only GET and HEAD` });
  });
  if (key.include_query_params.length && key.exclude_query_params.length) {
    problems.push({ field: 'cache_key.exclude_query_params', message: 'Give include_query_params or exclude_query_params, not both' });
  }
  const lower = (xs: string[]) => new Set(xs.map((x) => x.toLowerCase()));
  const bypassHeaders = lower(rule.bypass.if_header_present);
  for (const h of key.include_headers) {
    if (bypassHeaders.has(h.toLowerCase())) problems.push({ field: 'cache_key.include_headers', message: `${h} is also a bypass condition, so no response keyed on it is ever cached` });
  }
  for (const c of key.include_cookies) {
    if (rule.bypass.if_cookie_present.includes(c)) problems.push({ field: 'cache_key.include_cookies', message: `${c} is also a bypass condition, so no response keyed on it is ever cached` });
  }
  return problems;
}

// The defaults of a created rule: the edge snapshot's (one declaration per field).
const { id: _id, name: _name, match: _match, ttl_seconds: _ttl, ...edgeDefaults } = cacheRuleSnapshot.parse({ id: '-', ttl_seconds: 0 });
export const CACHE_RULE_DEFAULTS = edgeDefaults;

export const cacheRuleService = childService<CacheRule, CacheRuleInput & { distribution_id?: string }, CacheRuleInput>({
  entity: CacheRule,
  type: 'cache_rule',
  what: 'Cache rule',
  fields: ['name', 'enabled', 'priority', 'match', 'ttl_seconds', 'browser_ttl_seconds', 'cache_key', 'bypass', 'stale_while_revalidate_seconds',
    'stale_if_error_seconds', 'negative_ttl_seconds', 'cache_status_header'],
  defaults: CACHE_RULE_DEFAULTS,
  values(input, current) {
    const { match, cache_key, bypass, distribution_id: _d, ...rest } = input as CacheRuleInput & { distribution_id?: string };
    const values = { ...rest } as Partial<CacheRule>;
    if (match !== undefined) values.match = merged(current?.match ?? EMPTY_MATCH, match);
    if (cache_key !== undefined) values.cache_key = merged(current?.cache_key ?? EMPTY_KEY, cache_key);
    if (bypass !== undefined) values.bypass = merged(current?.bypass ?? EMPTY_BYPASS, bypass);
    for (const key of Object.keys(values) as (keyof CacheRule)[]) if (values[key] === undefined) delete values[key];
    return values;
  },
  async problems(_rc, next) {
    return { problems: ruleProblems(next) };
  },
});
