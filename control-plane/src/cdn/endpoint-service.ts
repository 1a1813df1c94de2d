// Endpoints (distributions), document 3 §3, §4.1; DESIGN.md §5. An endpoint
// is created `deploying` with a CDN hostname and stays so until the control
// channel reports propagation; a change moves it back to `deploying`, disable
// to `disabled`, enable to `deploying`. Writes that would leave the working
// configuration invalid are refused with 422 before anything is stored.
import { randomBytes } from 'node:crypto';
import { errorPageProblems } from '../../../shared/src/config/response-policies.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { found } from '../http/errors.ts';
import type { FieldError } from '../http/errors.ts';
import { CacheRule, CdnRoute, Endpoint, Origin } from './cdn.entities.ts';
import { CustomDomain } from './domain-entity.ts';
import { DEFAULT_COMPRESSION, DEFAULT_GEO, DEFAULT_TLS, type CreateEndpointInput, type UpdateEndpointInput } from './endpoint-record.ts';
import { assertValidConfiguration, merged, resourceInUse } from './fields.ts';
import { detachEndpointFromDrains } from './log-drain-service.ts';
import { defaultDenyProblems, policyProblems, tokenAuthProblems } from './policy-checks.ts';
import { usableOriginProblems } from './origin-service.ts';
import type { ShieldRegionCheck } from './services.ts';
import { endpointFields, publishedColumns } from './snapshot-fields.ts';

const ENDPOINT_FIELDS = [
  'name', 'default_origin_id', 'hostname', 'status', 'http_version', 'ipv6_enabled', 'response_headers_policy_id', 'tls_config', 'compression',
  'geo_restriction', 'custom_error_pages', 'shield_region', 'tags', 'token_auth_enabled', 'ip_default_action',
] as const satisfies readonly (keyof Endpoint)[];
const snapshot = (e: Endpoint) => Object.fromEntries(ENDPOINT_FIELDS.map((f) => [f, e[f]])) as Partial<Endpoint>;

const EDGE_COLUMNS = publishedColumns(endpointFields);

/** The endpoint's configuration changed at the edge: `deploying` until the nodes have it (a disabled endpoint stays disabled). */
export function markDeploying(endpoint: Endpoint): void {
  if (endpoint.status === 'disabled') return;
  endpoint.status = 'deploying';
  endpoint.status_reason = null;
}

export async function findEndpoint(rc: RequestContext, id: string): Promise<Endpoint> {
  return found(await rc.em.findOne(Endpoint, id), 'Endpoint');
}

/** A DNS-safe label of 80 random bits: a letter, then 15 of [a-z2-7] (base32). */
export function endpointLabel(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  const bytes = randomBytes(16);
  let label = alphabet[bytes[0]! % 26]!;
  for (let i = 1; i < 16; i++) label += alphabet[bytes[i]! & 31]!;
  return label;
}

/** What would make the endpoint's own settings invalid for the edge. */
async function settingsProblems(
  rc: RequestContext,
  e: Pick<Endpoint, 'geo_restriction' | 'response_headers_policy_id' | 'token_auth_enabled' | 'ip_default_action' | 'custom_error_pages'> & { id?: string },
): Promise<FieldError[]> {
  const problems = [
    ...(await policyProblems(rc, e.response_headers_policy_id)), ...(await tokenAuthProblems(rc, e.id, e.token_auth_enabled)),
    ...(await defaultDenyProblems(rc, e.id, e.ip_default_action)), ...errorPageProblems(e.custom_error_pages),
  ];
  if (e.geo_restriction.enabled && e.geo_restriction.policy === 'allowlist' && e.geo_restriction.countries.length === 0) {
    problems.push({ field: 'geo_restriction.countries', message: 'An enabled allowlist without countries would block every viewer' });
  }
  return problems;
}

/** A shield_region that is not one of the shield regions (the regions of edge nodes willing to shield: GET /v1/cdn/shield-regions), named. */
async function shieldRegionProblems(region: string | null | undefined, shieldRegions: ShieldRegionCheck): Promise<FieldError[]> {
  if (region == null || shieldRegions === undefined) return [];
  const regions = await shieldRegions();
  if (regions.includes(region)) return [];
  return [{
    field: 'shield_region',
    message: regions.length
      ? `${region} is not a shield region; the shield regions (GET /v1/cdn/shield-regions) are: ${regions.join(', ')}`
      : `${region} is not a shield region: no edge node shields yet (an agent shields with SHIELD_ADDRESS)`,
  }];
}

export async function createEndpoint(rc: RequestContext, input: CreateEndpointInput, domain: string, shieldRegions?: ShieldRegionCheck): Promise<Endpoint> {
  const values = {
    ...input,
    tls_config: merged(DEFAULT_TLS, input.tls_config),
    compression: merged(DEFAULT_COMPRESSION, input.compression),
    geo_restriction: merged(DEFAULT_GEO, input.geo_restriction),
  };
  const { problems, origin } = await usableOriginProblems(rc, input.default_origin_id, null, 'default_origin_id');
  assertValidConfiguration([...problems, ...(await settingsProblems(rc, values)), ...(await shieldRegionProblems(input.shield_region, shieldRegions))]);
  const endpoint = rc.em.create(Endpoint, { ...values, status: 'deploying', hostname: `${endpointLabel()}.${domain}` } as never);
  // The default origin joins the new endpoint (it belonged to none).
  origin!.distribution = endpoint;
  recordAudit(rc, { action: 'endpoint.created', resource_type: 'endpoint', resource_id: endpoint.id, changes: changesOf({}, snapshot(endpoint)) });
  await rc.em.flush();
  return endpoint;
}

export async function updateEndpoint(rc: RequestContext, id: string, input: UpdateEndpointInput, shieldRegions?: ShieldRegionCheck): Promise<Endpoint> {
  const endpoint = await findEndpoint(rc, id);
  const before = snapshot(endpoint);
  const next = {
    ...input,
    tls_config: merged(endpoint.tls_config, input.tls_config),
    compression: merged(endpoint.compression, input.compression),
    geo_restriction: merged(endpoint.geo_restriction, input.geo_restriction),
  };
  const problems = await settingsProblems(rc, {
    geo_restriction: next.geo_restriction,
    response_headers_policy_id: input.response_headers_policy_id === undefined ? endpoint.response_headers_policy_id : input.response_headers_policy_id,
    token_auth_enabled: input.token_auth_enabled ?? endpoint.token_auth_enabled,
    ip_default_action: input.ip_default_action ?? endpoint.ip_default_action,
    custom_error_pages: input.custom_error_pages ?? endpoint.custom_error_pages,
    id: endpoint.id,
  });
  if (input.default_origin_id !== undefined && input.default_origin_id !== endpoint.default_origin_id) {
    problems.push(...(await usableOriginProblems(rc, input.default_origin_id, endpoint.id, 'default_origin_id')).problems);
  }
  if (input.shield_region !== endpoint.shield_region) problems.push(...(await shieldRegionProblems(input.shield_region, shieldRegions)));
  assertValidConfiguration(problems);
  for (const [field, value] of Object.entries(next)) if (value !== undefined) (endpoint as unknown as Record<string, unknown>)[field] = value;
  if (input.default_origin_id !== undefined) {
    const origin = await rc.em.findOneOrFail(Origin, input.default_origin_id);
    if (!origin.distribution) origin.distribution = endpoint;
  }
  const changes = changesOf(before, snapshot(endpoint));
  if (Object.keys(changes).length === 0) return endpoint;
  // A change the edge sees has to reach it again (a disabled endpoint stays disabled); one it does not (tags) publishes nothing.
  if (Object.keys(changes).some((field) => EDGE_COLUMNS.has(field))) markDeploying(endpoint);
  recordAudit(rc, { action: 'endpoint.updated', resource_type: 'endpoint', resource_id: endpoint.id, changes: changesOf(before, snapshot(endpoint)) });
  await rc.em.flush();
  return endpoint;
}

export async function setEndpointEnabled(rc: RequestContext, id: string, enabled: boolean): Promise<Endpoint> {
  const endpoint = await findEndpoint(rc, id);
  if (enabled === (endpoint.status !== 'disabled')) return endpoint;
  const before = snapshot(endpoint);
  endpoint.status = enabled ? 'deploying' : 'disabled';
  endpoint.status_reason = null;
  recordAudit(rc, { action: enabled ? 'endpoint.enabled' : 'endpoint.disabled', resource_type: 'endpoint', resource_id: endpoint.id, changes: changesOf(before, snapshot(endpoint)) });
  await rc.em.flush();
  return endpoint;
}

/** Custom domains an endpoint still holds (domain-entity.ts). */
async function customDomainCount(rc: RequestContext, endpointId: string): Promise<number> {
  return rc.em.count(CustomDomain, { endpoint: endpointId });
}

/** Removes the endpoint with its origins, routes and cache rules, and takes it out of log drains; refused (409) while custom domains remain. */
export async function deleteEndpoint(rc: RequestContext, id: string): Promise<void> {
  const endpoint = await findEndpoint(rc, id);
  const domains = await customDomainCount(rc, endpoint.id);
  if (domains > 0) throw resourceInUse(`The endpoint still has ${domains} custom domain(s); remove them first`);
  await rc.em.transactional(async (em) => {
    const counts = {
      routes: await em.nativeDelete(CdnRoute, { distribution: endpoint.id }),
      cache_rules: await em.nativeDelete(CacheRule, { distribution: endpoint.id }),
      origins: await em.nativeDelete(Origin, { distribution: endpoint.id }),
      log_drains_detached: await detachEndpointFromDrains(rc, em, endpoint.id),
    };
    recordAudit(rc, {
      action: 'endpoint.deleted', resource_type: 'endpoint', resource_id: endpoint.id,
      changes: changesOf(snapshot(endpoint), {}, ENDPOINT_FIELDS), metadata: { removed: counts },
    }, em);
    em.remove(endpoint);
  });
}
