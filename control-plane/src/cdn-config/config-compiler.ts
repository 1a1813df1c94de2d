// Compiles the working configuration (the CDN tables) into the resources of
// a configuration version (shared/src/config/resources.ts): one per endpoint
// (with its origins, routes, cache rules, signing keys, IP rules and custom
// domains), one per response headers policy, one per log drain, each the JSON
// of its snapshot entry (shared/src/config/snapshot.ts). Secrets are unsealed:
// the edge needs them. Deterministic: rows sorted, members in a fixed order
// (jsonb objects come back in jsonb's own canonical key order), nothing from
// the clock except which retired signing secrets are still in their grace
// period, so an unchanged resource keeps its sha256.
//
// Set-based: one query per table, whatever the number of endpoints. The
// configuration is also validated as a whole: every problem is named by its
// resource ({resource_type, resource_id, message}).
import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import { endpointSnapshot, logDrainSnapshot, responseHeadersPolicySnapshot, type ResponseHeadersPolicySnapshot } from '../../../shared/src/config/snapshot.ts';
import { encodeResource, type EncodedResource, type ResourceType } from '../../../shared/src/config/resources.ts';
import { errorPageProblems, headerPolicyProblems } from '../../../shared/src/config/response-policies.ts';
import { canonicalCidr } from '../../../shared/src/match/cidr.ts';
import { ADMITTING_ACTIONS, type CacheRule, cacheRuleFields, type CdnRoute, type CdnServices, customDomainFields, drainSecrets, endpointFields, headerPolicyFields, ipRuleFields, keyAad, type LogDrain, logDrainFields, matchProblems, originFields, redirectProblems, type ResourceFields, routeFields, ruleProblems, selectList, type SigningKey, signingKeyFields, signingSecrets, sortedKeys, toEntry } from '../cdn/index.ts';
import type { ValidationProblem } from './config-entities.ts';

type Row = Record<string, any>;

export interface CompiledConfiguration {
  /** Every resource, sorted by key. */
  resources: EncodedResource[];
  /** What makes the configuration invalid (empty when valid). */
  problems: ValidationProblem[];
}

/** The services a compile uses: unsealing secrets, the clock (grace periods), the CDN domain. */
export type CompileServices = Pick<CdnServices, 'secretBox' | 'clock' | 'config'>;

// One statement per table (its columns from the table of fields); children in the order the edge evaluates them (priority, then id).
const QUERIES = {
  endpoints: { fields: endpointFields, order: 'id' },
  origins: { fields: originFields, order: 'id' },
  routes: { fields: routeFields, order: 'priority, id' },
  cacheRules: { fields: cacheRuleFields, order: 'priority, id' },
  signingKeys: { fields: signingKeyFields, order: 'id' },
  // Equal priorities oldest first: the order the API lists them in, and the edge keeps the snapshot's order among equals.
  ipRules: { fields: ipRuleFields, order: 'priority, created_at, id' },
  // Only validated claims are served (issue 21 item 7): a custom certificate checked at creation, or a managed one issued.
  domains: { fields: customDomainFields, where: 'certificate_pem is not null', order: 'hostname, id' },
  policies: { fields: headerPolicyFields, order: 'id' },
  drains: { fields: logDrainFields, order: 'id' },
} satisfies Record<string, Query>;

interface Query { fields: ResourceFields; where?: string; order: string }

/** Rows grouped by a parent id, keeping the query's order. */
function groupBy(rows: Row[], key: string): Map<string, Row[]> {
  const groups = new Map<string, Row[]>();
  for (const row of rows) {
    const parent = row[key];
    if (parent === null) continue;
    let list = groups.get(parent);
    if (!list) groups.set(parent, (list = []));
    list.push(row);
  }
  return groups;
}

/**
 * Bodies (by sha256) that passed their snapshot schema in this process: the
 * same bytes pass again, so a compile parses only what changed since the last.
 */
const schemaChecked = new LRUCache<string, true>({ max: 200_000 });

/** A zod failure as one line per issue: "routes.0.origin_id: Invalid input". */
const zodMessages = (error: z.ZodError) => error.issues.map((i) => `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`);

/**
 * Reads and compiles the whole working configuration through `em` (call it
 * inside the transaction that holds the configuration lock for a consistent
 * read), and validates it.
 */
export async function compileConfiguration(app: CompileServices, em: EntityManager): Promise<CompiledConfiguration> {
  const run = (query: Query) => em.execute<Row[]>(
    `select ${selectList(query.fields)} from ${query.fields.table}${query.where ? ` where ${query.where}` : ''} order by ${query.order}`,
  );
  const [endpoints, origins, routes, cacheRules, signingKeys, ipRules, domains, policies, drains] = await Promise.all([
    run(QUERIES.endpoints), run(QUERIES.origins), run(QUERIES.routes), run(QUERIES.cacheRules), run(QUERIES.signingKeys),
    run(QUERIES.ipRules), run(QUERIES.domains), run(QUERIES.policies), run(QUERIES.drains),
  ]);
  const problems: ValidationProblem[] = [];
  const problem = (resource_type: string, resource_id: string, message: string) => problems.push({ resource_type, resource_id, message });
  const resources: EncodedResource[] = [];
  const add = (type: ResourceType, entry: Row, schema: z.ZodType) => {
    const resource = encodeResource(type, entry as { id: string });
    if (!schemaChecked.has(resource.sha256)) {
      const parsed = schema.safeParse(entry);
      if (parsed.success) schemaChecked.set(resource.sha256, true);
      else for (const message of zodMessages(parsed.error)) problem(type, entry.id, `Not a valid ${type} for the edge: ${message}`);
    }
    resources.push(resource);
  };
  // The same patterns recur across thousands of routes: check each once.
  const memo = <T>(fn: (x: T) => { field: string; message: string }[]) => {
    const seen = new Map<string, { field: string; message: string }[]>();
    return (x: T) => {
      const key = JSON.stringify(x);
      let found = seen.get(key);
      if (!found) seen.set(key, (found = fn(x)));
      return found;
    };
  };
  const routeMatchProblems = memo((m: CdnRoute['match']) => matchProblems(m));
  const routeRedirectProblems = memo((r: CdnRoute['redirect_rules']) => redirectProblems(r));
  const cacheProblems = memo((c: Pick<CacheRule, 'match' | 'cache_key' | 'bypass'>) => ruleProblems(c));

  const policyIds = new Set(policies.map((p) => p.id as string));
  const originsByEndpoint = groupBy(origins, 'distribution_id');
  const routesByEndpoint = groupBy(routes, 'distribution_id');
  const cacheRulesByEndpoint = groupBy(cacheRules, 'distribution_id');
  const keysByEndpoint = groupBy(signingKeys, 'endpoint_id');
  const ipRulesByEndpoint = groupBy(ipRules, 'endpoint_id');
  const domainsByEndpoint = groupBy(domains, 'endpoint_id');
  const endpointHostnames = new Map(endpoints.map((e) => [String(e.hostname).toLowerCase(), e.id as string]));
  const domainOwners = new Map<string, string>();
  const zone = app.config.CDN_DOMAIN;

  for (const e of endpoints) {
    const own = originsByEndpoint.get(e.id) ?? [];
    const ownOrigins = new Map(own.map((o) => [o.id as string, o]));
    const defaultOrigin = ownOrigins.get(e.default_origin_id);
    if (!defaultOrigin) problem('endpoint', e.id, `Its default origin ${e.default_origin_id} does not exist or belongs to another endpoint`);
    else if (!defaultOrigin.enabled) problem('endpoint', e.id, `Its default origin ${e.default_origin_id} is disabled`);
    if (e.response_headers_policy_id && !policyIds.has(e.response_headers_policy_id)) {
      problem('endpoint', e.id, `Response headers policy ${e.response_headers_policy_id} does not exist`);
    }
    if (e.geo_restriction?.enabled && e.geo_restriction.policy === 'allowlist' && !e.geo_restriction.countries?.length) {
      problem('endpoint', e.id, 'An enabled geo allowlist without countries would block every viewer');
    }
    for (const p of errorPageProblems(e.custom_error_pages)) problem('endpoint', e.id, `${p.field}: ${p.message}`);

    const routeEntries = (routesByEndpoint.get(e.id) ?? []).map((r) => {
      const origin = ownOrigins.get(r.origin_id);
      if (!origin) problem('route', r.id, `Its origin ${r.origin_id} does not exist or belongs to another endpoint`);
      else if (r.enabled && !origin.enabled) problem('route', r.id, `Its origin ${r.origin_id} is disabled`);
      if (r.response_headers_policy_id && !policyIds.has(r.response_headers_policy_id)) {
        problem('route', r.id, `Response headers policy ${r.response_headers_policy_id} does not exist`);
      }
      for (const p of [...routeMatchProblems(r.match), ...routeRedirectProblems(r.redirect_rules)]) problem('route', r.id, `${p.field}: ${p.message}`);
      return toEntry(routeFields, r);
    });
    const cacheRuleEntries = (cacheRulesByEndpoint.get(e.id) ?? []).map((c) => {
      for (const p of cacheProblems({ match: c.match, cache_key: c.cache_key, bypass: c.bypass })) problem('cache_rule', c.id, `${p.field}: ${p.message}`);
      return toEntry(cacheRuleFields, c);
    });

    // Signed URLs are checked by the edge when an endpoint's entry has signing keys: only with token authentication on.
    const keys = (keysByEndpoint.get(e.id) ?? []).filter((k) => k.status === 'active');
    if (e.token_auth_enabled && !keys.length) problem('endpoint', e.id, 'Token authentication is enabled but the endpoint has no active signing key');
    const signingKeyEntries = e.token_auth_enabled ? keys.flatMap((k) => {
      try {
        const secrets = signingSecrets(app as CdnServices, k as unknown as SigningKey);
        return [toEntry(signingKeyFields, k, { secrets })];
      } catch {
        problem('signing_key', k.id, 'Its secret cannot be decrypted (was SECRETS_KEY changed?)');
        return [];
      }
    }) : [];

    // The edge compiles each range with canonicalCidr too: what it could not use is named here rather than nacked there.
    const ipRuleEntries = (ipRulesByEndpoint.get(e.id) ?? []).map((r) => {
      const range = canonicalCidr(r.cidr);
      if ('problem' in range) problem('ip_rule', r.id, `cidr: ${range.problem}`);
      return toEntry(ipRuleFields, r);
    });
    if (e.ip_default_action === 'deny' && !ipRuleEntries.some((r) => (ADMITTING_ACTIONS as readonly string[]).includes(r.action))) {
      problem('endpoint', e.id, 'ip_default_action is deny but no allow or challenge IP rule admits anyone: every viewer would be refused');
    }

    const customDomains = (domainsByEndpoint.get(e.id) ?? []).map((d) => {
      const hostname = String(d.hostname).toLowerCase();
      const owner = endpointHostnames.get(hostname);
      if (owner) problem('custom_domain', d.id, `${hostname} is also the hostname of endpoint ${owner}`);
      if (hostname === zone || hostname.endsWith(`.${zone}`)) problem('custom_domain', d.id, `${hostname} lies inside the CDN's own domain ${zone}`);
      const other = domainOwners.get(hostname);
      if (other) problem('custom_domain', d.id, `${hostname} is also a custom domain of endpoint ${other}`);
      domainOwners.set(hostname, e.id);
      let privateKey: string | null = null;
      if (d.certificate_pem && d.private_key_sealed) {
        try {
          privateKey = app.secretBox.openString(d.private_key_sealed, keyAad(d.id));
        } catch {
          problem('custom_domain', d.id, 'Its private key cannot be decrypted (was SECRETS_KEY changed?)');
        }
      } else if (d.certificate_pem) problem('custom_domain', d.id, 'It has a certificate without a private key');
      return toEntry(customDomainFields, d, { certificate_pem: privateKey ? d.certificate_pem : null, private_key_pem: privateKey });
    });

    add('endpoint', toEntry(endpointFields, e, {
      custom_domains: customDomains,
      origins: own.map((o) => toEntry(originFields, o)),
      routes: routeEntries,
      cache_rules: cacheRuleEntries,
      signing_keys: signingKeyEntries,
      ip_rules: ipRuleEntries,
    }), endpointSnapshot);
  }

  for (const p of policies) {
    const entry = toEntry(headerPolicyFields, p) as ResponseHeadersPolicySnapshot;
    for (const x of headerPolicyProblems(entry)) problem('response_headers_policy', p.id, `${x.field}: ${x.message}`);
    add('response_headers_policy', entry, responseHeadersPolicySnapshot);
  }

  const endpointIds = new Set(endpoints.map((e) => e.id as string));
  for (const d of drains) {
    for (const id of d.endpoint_ids as string[]) if (!endpointIds.has(id)) problem('log_drain', d.id, `Endpoint ${id} does not exist`);
    let config: unknown = d.destination_config;
    try {
      config = sortedKeys({ ...d.destination_config, ...drainSecrets(app, d as unknown as LogDrain) });
    } catch {
      problem('log_drain', d.id, 'Its credentials cannot be decrypted (was SECRETS_KEY changed?)');
    }
    add('log_drain', toEntry(logDrainFields, d, { destination_config: config }), logDrainSnapshot);
  }

  resources.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return { resources, problems };
}
