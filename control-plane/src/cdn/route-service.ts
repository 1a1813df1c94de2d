// Routes, document 3 §4.3. A route is valid when its origin exists, belongs to
// its distribution (a free origin joins it) and is enabled while the route is,
// its match states at least one condition and every host pattern and path
// glob compiles with the edge's own matchers, its redirect rules' globs
// compile and their capture references exist, and any header policy it names
// exists.
import { routeSnapshot } from '../../../shared/src/config/snapshot.ts';
import type { FieldError } from '../http/errors.ts';
import { hostPatternProblem } from '../../../shared/src/match/host.ts';
import { pathGlobProblem } from '../../../shared/src/match/glob.ts';
import { redirectRuleProblems } from '../../../shared/src/match/redirect.ts';
import { CdnRoute, Endpoint, Origin, type RouteMatch } from './cdn.entities.ts';
import { childService, patternProblems } from './child-service.ts';
import { assertValidConfiguration, merged } from './fields.ts';
import { policyProblems } from './policy-checks.ts';
import { usableOriginProblems } from './origin-service.ts';
import type { RouteInput } from './route-record.ts';

const EMPTY_MATCH: RouteMatch = { hosts: [], paths: [], methods: [] };

export function matchProblems(match: RouteMatch): FieldError[] {
  const problems = [
    ...patternProblems('match.hosts', match.hosts, hostPatternProblem),
    ...patternProblems('match.paths', match.paths, pathGlobProblem),
  ];
  if (!match.hosts.length && !match.paths.length && !match.methods.length) problems.push({ field: 'match', message: 'Must state at least one of hosts, paths, methods' });
  return problems;
}

/** What the edge could not answer in the route's redirect rules: the edge's own compiler (shared/src/match/redirect.ts) says. */
export function redirectProblems(rules: CdnRoute['redirect_rules']): FieldError[] {
  return rules.flatMap((rule, i) => redirectRuleProblems(rule).map((p) => ({ field: `redirect_rules[${i}].${p.field}`, message: p.message })));
}

// The defaults of a created route: the edge snapshot's (one declaration per field).
const { id: _id, name: _name, origin_id: _origin, match: _match, ...edgeDefaults } = routeSnapshot.parse({ id: '-', origin_id: '-' });
export const ROUTE_DEFAULTS = edgeDefaults;

export const routeService = childService<CdnRoute, RouteInput & { distribution_id?: string }, RouteInput>({
  entity: CdnRoute,
  type: 'route',
  what: 'Route',
  fields: ['name', 'origin', 'enabled', 'priority', 'match', 'strip_prefix', 'response_headers_policy_id', 'redirect_rules', 'compression_enabled'],
  defaults: ROUTE_DEFAULTS,
  values(input, current) {
    const { origin_id, match, distribution_id: _d, ...rest } = input as RouteInput & { distribution_id?: string };
    const values: Partial<CdnRoute> = { ...rest } as Partial<CdnRoute>;
    if (match !== undefined) values.match = merged(current?.match ?? EMPTY_MATCH, match as Partial<RouteMatch>);
    if (origin_id !== undefined) values.origin = { id: origin_id } as never;
    for (const key of Object.keys(values) as (keyof CdnRoute)[]) if (values[key] === undefined) delete values[key];
    return values;
  },
  async problems(rc, next, distributionId, changed) {
    const problems = [...matchProblems(next.match), ...redirectProblems(next.redirect_rules), ...(await policyProblems(rc, next.response_headers_policy_id))];
    let apply: (() => void) | undefined;
    if (changed.includes('origin') || changed.includes('enabled')) {
      const usable = await usableOriginProblems(rc, next.origin.id, distributionId, 'origin_id', next.enabled);
      problems.push(...usable.problems);
      if (usable.origin && !usable.origin.distribution) apply = () => { usable.origin!.distribution = rc.em.getReference(Endpoint, distributionId); };
    }
    return { problems, apply };
  },
  async distributionOf(rc, input) {
    const origin = input.origin_id ? await rc.em.findOne(Origin, input.origin_id) : null;
    if (!origin) assertValidConfiguration([{ field: 'origin_id', message: `Origin ${input.origin_id} does not exist` }]);
    return origin!.distribution?.id ?? null;
  },
});
