// One declaration per configuration field, checked: for every field that both
// an API request body (control-plane/src/cdn/*-record.ts) and the edge
// snapshot (shared/src/config/snapshot.ts) declare, whatever the API admits
// the snapshot admits too (else a configuration the API accepted would be
// refused by every agent at publish), and the fields the API reads off the
// snapshot (origins) have the snapshot's bounds exactly, but for the
// differences listed here with their reason.
import t from 'tap';
import { z } from 'zod';
import {
  cacheRuleSnapshot, customDomainSnapshot, endpointSnapshot, ipRuleSnapshot, originSnapshot, routeSnapshot, signingKeySnapshot,
} from '../../../shared/src/config/snapshot.ts';
import { createCacheRuleBody, updateCacheRuleBody } from './cache-rule-record.ts';
import { CACHE_RULE_DEFAULTS } from './cache-rule-service.ts';
import { createDomainBody } from './domain-record.ts';
import { createEndpointBody, DEFAULT_COMPRESSION, DEFAULT_GEO, DEFAULT_TLS, updateEndpointBody } from './endpoint-record.ts';
import { createIpRuleBody, updateIpRuleBody } from './ip-rule-record.ts';
import { createOriginBody, updateOriginBody } from './origin-record.ts';
import { ORIGIN_DEFAULTS } from './origin-service.ts';
import { createRouteBody, updateRouteBody } from './route-record.ts';
import { ROUTE_DEFAULTS } from './route-service.ts';
import { createSigningKeyBody } from './signing-key-record.ts';

interface FieldBounds {
  type: string;
  min?: number;
  max?: number;
  int?: boolean;
  values?: readonly unknown[];
  /** For arrays: what each element admits. */
  element?: FieldBounds;
  /** The field rewrites its input (the bounds are the input's). */
  transformed?: boolean;
  /** A string format (uuid): its own length. */
  format?: string;
  /** For objects: each member's bounds. */
  members?: Record<string, FieldBounds>;
}

/** The bounds of a schema, through optional, nullable, default and pipes (the input side). */
function fieldBounds(schema: z.ZodType): FieldBounds {
  const def = (schema as z.ZodType & { _zod: { def: { type: string; innerType?: z.ZodType; in?: z.ZodType } } })._zod.def;
  if (def.innerType && ['optional', 'nullable', 'default', 'prefault', 'readonly', 'nonoptional', 'catch'].includes(def.type)) return fieldBounds(def.innerType);
  // A value the field rewrites (a country code upper-cased, a domain to punycode): its own code bounds the result.
  if (def.type === 'pipe' && def.in) return { ...fieldBounds(def.in), transformed: true };
  if (def.type === 'string' && (def as { format?: string }).format === 'uuid') return { type: 'string', format: 'uuid', min: 36, max: 36 };
  if (schema instanceof z.ZodUnion && schema.options.every((o) => o instanceof z.ZodLiteral)) {
    return { type: 'enum', values: schema.options.flatMap((o) => [...(o as z.ZodLiteral).values]).sort() };
  }
  if (schema instanceof z.ZodNumber) {
    return { type: 'number', min: schema.minValue ?? undefined, max: schema.maxValue ?? undefined, int: schema.isInt };
  }
  if (schema instanceof z.ZodString) {
    return { type: 'string', min: schema.minLength ?? undefined, max: schema.maxLength ?? undefined };
  }
  if (schema instanceof z.ZodEnum) return { type: 'enum', values: [...schema.options].sort() };
  if (schema instanceof z.ZodLiteral) return { type: 'enum', values: [...schema.values].sort() };
  if (schema instanceof z.ZodArray) {
    const checks = (schema._zod.def.checks ?? []) as { _zod: { def: { check: string; minimum?: number; maximum?: number } } }[];
    const min = checks.find((c) => c._zod.def.check === 'min_length')?._zod.def.minimum;
    const max = checks.find((c) => c._zod.def.check === 'max_length')?._zod.def.maximum;
    return { type: 'array', min, max, element: fieldBounds(schema.element as z.ZodType) };
  }
  if (schema instanceof z.ZodObject) {
    return { type: 'object', members: Object.fromEntries(Object.entries(schema.shape).map(([k, v]) => [k, fieldBounds(v as z.ZodType)])) };
  }
  return { type: def.type };
}

/** Where the API admits what the snapshot refuses; empty when the API's bounds lie within the snapshot's. */
function outside(path: string, api: FieldBounds, edge: FieldBounds): string[] {
  if (edge.type === 'unknown' || edge.type === 'any') return [];
  if (api.transformed) return []; // bounded by its own code: TRANSFORMED below
  if (api.type === 'enum' && (edge.type === 'string' || edge.type === 'number')) {
    // Each value the API takes must be one the snapshot's string or number admits.
    return api.values!.flatMap((v) => outside(`${path} = ${String(v)}`, typeof v === 'number'
      ? { type: 'number', min: v, max: v, int: Number.isInteger(v) }
      : { type: 'string', min: String(v).length, max: String(v).length }, edge));
  }
  if (api.type !== edge.type) return [`${path}: the API takes ${api.type}, the snapshot ${edge.type}`];
  const problems: string[] = [];
  if (edge.min !== undefined && (api.min === undefined || api.min < edge.min)) problems.push(`${path}: the API's minimum ${api.min ?? 'none'} is below the snapshot's ${edge.min}`);
  if (edge.max !== undefined && edge.max < Number.MAX_SAFE_INTEGER && (api.max === undefined || api.max > edge.max)) {
    problems.push(`${path}: the API's maximum ${api.max ?? 'none'} is above the snapshot's ${edge.max}`);
  }
  if (edge.int && !api.int) problems.push(`${path}: the API takes fractions, the snapshot integers`);
  if (edge.values && api.values) {
    const extra = api.values.filter((v) => !edge.values!.includes(v));
    if (extra.length) problems.push(`${path}: the API takes ${extra.join(', ')}, which the snapshot refuses`);
  }
  if (edge.element && api.element) problems.push(...outside(`${path}[]`, api.element, edge.element));
  for (const [name, member] of Object.entries(api.members ?? {})) {
    const other = edge.members?.[name];
    if (other) problems.push(...outside(`${path}.${name}`, member, other));
  }
  return problems;
}

/** Fields the API rewrites before they are stored, bounded by that code rather than by the schema. */
const TRANSFORMED = {
  'endpoint.geo_restriction.countries[]': 'ISO 3166 alpha-2 codes, upper-cased (countryCodeField): two letters, as the snapshot asks',
  'route.match.methods[]': 'HTTP method names, upper-cased',
  'cache rule.match.methods[]': 'HTTP method names, upper-cased',
  'custom domain.hostname': 'normaliseDomain: punycode of at most 253 characters, as the snapshot asks (the input may be Unicode)',
} as const;

const resources = [
  ['origin', createOriginBody, originSnapshot],
  ['route', createRouteBody, routeSnapshot],
  ['cache rule', createCacheRuleBody, cacheRuleSnapshot],
  ['endpoint', createEndpointBody, endpointSnapshot],
  ['signing key', createSigningKeyBody, signingKeySnapshot],
  ['ip rule', createIpRuleBody, ipRuleSnapshot],
  ['custom domain', createDomainBody, customDomainSnapshot],
] as const;

t.test('every field the API admits, the edge snapshot admits', async (t) => {
  const transformed: string[] = [];
  for (const [name, body, snapshot] of resources) {
    const api = fieldBounds(body as z.ZodType).members!;
    const edge = fieldBounds(snapshot).members!;
    const common = Object.keys(api).filter((field) => field in edge);
    t.ok(common.length > 0, `${name}: the API and the snapshot share fields`);
    const walk = (path: string, a: FieldBounds) => {
      if (a.transformed) transformed.push(path);
      if (a.element) walk(`${path}[]`, a.element);
      for (const [k, v] of Object.entries(a.members ?? {})) walk(`${path}.${k}`, v);
    };
    for (const field of common) {
      walk(`${name}.${field}`, api[field]!);
      t.same(outside(`${name}.${field}`, api[field]!, edge[field]!), [], `${name}.${field}`);
    }
  }
  t.same(transformed.sort(), Object.keys(TRANSFORMED).sort(), 'the rewritten fields are the listed ones');
});

/**
 * The resources whose API fields are read off the snapshot (declared()): those fields must have the
 * snapshot's bounds exactly, but for the differences listed with their reason (docs/decisions.md), and a
 * created resource the snapshot's defaults. The fields left out keep bounds of the API's own (names,
 * lists the API caps in length and the snapshot does not).
 */
const DERIVED = [
  {
    name: 'origin', bodies: [createOriginBody, updateOriginBody], snapshot: originSnapshot,
    own: ['name', 'host', 'custom_headers', 'health_check_url'],
    differences: {
      // Probes from every node of the fleet each second are a load on the origin; an agent's own file and its tests may use 1 s.
      health_check_interval_seconds: { min: 5 },
    } as Record<string, Partial<FieldBounds>>,
    defaults: ORIGIN_DEFAULTS, required: { id: '-', host: '-' }, notDefaulted: ['id', 'name', 'host'],
  },
  {
    name: 'cache rule', bodies: [createCacheRuleBody, updateCacheRuleBody], snapshot: cacheRuleSnapshot,
    own: ['name', 'match', 'cache_key', 'bypass'],
    differences: {} as Record<string, Partial<FieldBounds>>,
    defaults: CACHE_RULE_DEFAULTS, required: { id: '-', ttl_seconds: 0 }, notDefaulted: ['id', 'name', 'match', 'ttl_seconds'],
  },
  {
    name: 'route', bodies: [createRouteBody, updateRouteBody], snapshot: routeSnapshot,
    own: ['name', 'origin_id', 'match', 'strip_prefix', 'response_headers_policy_id', 'redirect_rules'],
    differences: {} as Record<string, Partial<FieldBounds>>,
    defaults: ROUTE_DEFAULTS, required: { id: '-', origin_id: '-' }, notDefaulted: ['id', 'name', 'origin_id', 'match'],
  },
  {
    name: 'ip rule', bodies: [createIpRuleBody, updateIpRuleBody], snapshot: ipRuleSnapshot,
    own: ['cidr'],
    differences: {} as Record<string, Partial<FieldBounds>>,
    defaults: createIpRuleBody.parse({ action: 'block', cidr: '192.0.2.0/24' }), required: { id: '-', action: 'block', cidr: '-' }, notDefaulted: ['id', 'action', 'cidr'],
  },
  {
    name: 'endpoint', bodies: [createEndpointBody, updateEndpointBody], snapshot: endpointSnapshot,
    // Nested members are partly the snapshot's (compression, geo_restriction, custom_error_pages): checked by containment above.
    own: ['name', 'default_origin_id', 'response_headers_policy_id', 'tls_config', 'compression', 'geo_restriction', 'custom_error_pages', 'shield_region'],
    differences: {} as Record<string, Partial<FieldBounds>>,
    defaults: {
      ...createEndpointBody.parse({ name: 'x', default_origin_id: '3d6f0a2e-8b4c-4e1f-9a7d-5c2b8e0f6a13' }),
      tls_config: DEFAULT_TLS, compression: DEFAULT_COMPRESSION, geo_restriction: DEFAULT_GEO,
    },
    required: { id: '-', hostname: '-', default_origin_id: '-', origins: [{ id: '-', host: '-' }] },
    notDefaulted: ['id', 'name', 'hostname', 'enabled', 'default_origin_id', 'custom_domains', 'origins', 'routes', 'cache_rules', 'signing_keys', 'ip_rules'],
  },
  {
    name: 'signing key', bodies: [createSigningKeyBody], snapshot: signingKeySnapshot,
    own: ['name', 'secret', 'token_param', 'expires_param'],
    differences: {} as Record<string, Partial<FieldBounds>>,
    defaults: createSigningKeyBody.parse({ name: 'x' }), required: { id: '-', secrets: [{ secret: 'x'.repeat(32) }] }, notDefaulted: ['id', 'secrets'],
  },
] as const;

for (const resource of DERIVED) {
  t.test(`a ${resource.name}'s fields have the snapshot's type, range and default`, async (t) => {
    const edge = fieldBounds(resource.snapshot).members!;
    for (const body of resource.bodies) {
      const api = fieldBounds(body as z.ZodType).members!;
      for (const [field, bounds] of Object.entries(api)) {
        if (!(field in edge) || (resource.own as readonly string[]).includes(field)) continue;
        t.same(bounds, { ...edge[field], ...resource.differences[field] }, field);
      }
    }
    const parsed: Record<string, unknown> = resource.snapshot.parse(resource.required);
    const defaults = Object.fromEntries(Object.entries(parsed).filter(([k]) => !(resource.notDefaulted as readonly string[]).includes(k)));
    t.match(resource.defaults, defaults, `a created ${resource.name} gets the snapshot's defaults`);
    t.ok(Object.keys(defaults).length > 0, 'the snapshot declares defaults');
  });
}

t.test('the comparison catches a bound the snapshot refuses', async (t) => {
  const api = fieldBounds(z.object({ n: z.number().int().min(0).max(10), e: z.enum(['a', 'b']), s: z.string().max(9) })).members!;
  const edge = fieldBounds(z.object({ n: z.number().int().min(1).max(5), e: z.enum(['a']), s: z.string().max(8) })).members!;
  t.same(['n', 'e', 's'].flatMap((k) => outside(k, api[k]!, edge[k]!)), [
    "n: the API's minimum 0 is below the snapshot's 1",
    "n: the API's maximum 10 is above the snapshot's 5",
    'e: the API takes b, which the snapshot refuses',
    "s: the API's maximum 9 is above the snapshot's 8",
  ]);
});
