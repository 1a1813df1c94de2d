// Origins, document 3 §4.2. The host is normalised and checked against the
// edge's SSRF rules at write time (origin-host.ts); an origin in use by an
// enabled route or as an endpoint's default cannot be disabled (422) or
// deleted (409). Custom header values never enter the audit trail.
import { originSnapshot } from '../../../shared/src/config/snapshot.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { found, type FieldError } from '../http/errors.ts';
import { ApiError } from '../http/errors.ts';
import { CdnRoute, Endpoint, Origin } from './cdn.entities.ts';
import { assertValidConfiguration, resourceInUse } from './fields.ts';
import { normaliseOriginHost, originHostRefusal } from './origin-host.ts';
import { MASKED_VALUE, maskedHeaders, type OriginInput } from './origin-record.ts';
import type { CdnServices } from './services.ts';

const ORIGIN_FIELDS = [
  'name', 'scheme', 'host', 'port', 'path_prefix', 'enabled', 'health_check_url', 'health_check_interval_seconds', 'verify_tls', 'allow_private_network',
  'ssrf_protection', 'timeout_ms', 'connect_timeout_ms', 'max_retries', 'retry_on', 'forward_host_header', 'custom_headers', 'tags',
] as const satisfies readonly (keyof Origin)[];
const snapshot = (o: Origin) => ({
  ...Object.fromEntries(ORIGIN_FIELDS.map((f) => [f, o[f]])),
  custom_headers: maskedHeaders(o.custom_headers),
  distribution_id: o.distribution?.id ?? null,
}) as Record<string, unknown>;

// The defaults of a created origin: the edge snapshot's (one declaration per field), and what only the API has.
const { id: _id, name: _name, host: _host, ...edgeDefaults } = originSnapshot.parse({ id: '-', host: '-' });
export const ORIGIN_DEFAULTS = { ...edgeDefaults, health_status: 'unknown', tags: [] as string[] } as const;

/** What writing an origin needs beyond the request: the host check's lookup and timeout. */
export type OriginWriteServices = Pick<CdnServices, 'cdnHostLookup' | 'config'>;

export async function findOrigin(rc: RequestContext, id: string): Promise<Origin> {
  return found(await rc.em.findOne(Origin, id), 'Origin');
}

/**
 * Problems with using an origin from an endpoint (default_origin_id) or a
 * route of `distributionId` (null: an endpoint being created): it must
 * exist, be enabled (when `requireEnabled`), and belong to that endpoint or
 * to none (it then joins it).
 */
export async function usableOriginProblems(
  rc: RequestContext, originId: string, distributionId: string | null, field: string, requireEnabled = true,
): Promise<{ problems: FieldError[]; origin: Origin | null }> {
  const origin = await rc.em.findOne(Origin, originId);
  if (!origin) return { problems: [{ field, message: `Origin ${originId} does not exist` }], origin };
  const problems: FieldError[] = [];
  if (requireEnabled && !origin.enabled) problems.push({ field, message: `Origin ${originId} is disabled` });
  const owner = origin.distribution?.id ?? null;
  if (owner !== null && owner !== distributionId) problems.push({ field, message: `Origin ${originId} belongs to endpoint ${owner}` });
  return { problems, origin };
}

/** The parts of an origin's address an input sets (url expanded), normalised; 400 on a host that is not one. */
function addressOf(input: OriginInput): Partial<Pick<Origin, 'scheme' | 'host' | 'port' | 'path_prefix'>> {
  const parts: Partial<Pick<Origin, 'scheme' | 'host' | 'port' | 'path_prefix'>> = {};
  let rawHost = input.host;
  let hostField = 'host';
  if (input.url !== undefined) {
    const url = new URL(input.url);
    parts.scheme = url.protocol.slice(0, -1) as Origin['scheme'];
    rawHost = url.hostname;
    hostField = 'url';
    if (url.port) parts.port = Number(url.port);
    parts.path_prefix = url.pathname === '/' ? '' : url.pathname;
  } else {
    if (input.scheme !== undefined) parts.scheme = input.scheme;
    if (input.port !== undefined) parts.port = input.port;
    if (input.path_prefix !== undefined) parts.path_prefix = input.path_prefix;
  }
  if (rawHost !== undefined) {
    const host = normaliseOriginHost(rawHost);
    if (!host) throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: hostField, message: 'Must be a DNS name or an IP address' }] });
    parts.host = host;
  }
  return parts;
}

/** 422 when the edge would refuse to dial the origin's host (SSRF), naming the address and how to allow it. */
async function checkHost(app: OriginWriteServices, o: Pick<Origin, 'host' | 'allow_private_network' | 'ssrf_protection'>, field: string): Promise<void> {
  const refusal = await originHostRefusal(o.host, o, app.cdnHostLookup, app.config.CDN_ORIGIN_DNS_TIMEOUT_MS);
  if (!refusal) return;
  const via = refusal.address === o.host ? '' : ` (it resolves to ${refusal.address})`;
  const message = refusal.kind === 'private'
    ? `${o.host} is a private-use address${via}; set allow_private_network to true to allow it`
    : `${o.host} is a link-local, metadata or reserved address${via}; only allow_private_network true with ssrf_protection false allows it`;
  assertValidConfiguration([{ field, message }]);
}

/** Routes and endpoints whose validity depends on the origin being there and enabled. */
async function dependents(rc: RequestContext, origin: Origin) {
  const [routes, endpoints] = await Promise.all([
    rc.em.find(CdnRoute, { origin: origin.id }, { fields: ['id', 'enabled'] }),
    rc.em.find(Endpoint, { default_origin_id: origin.id }, { fields: ['id'] }),
  ]);
  return { routes, enabledRoutes: routes.filter((r) => r.enabled), endpoints };
}

async function checkCanDisable(rc: RequestContext, origin: Origin): Promise<void> {
  const { enabledRoutes, endpoints } = await dependents(rc, origin);
  assertValidConfiguration([
    ...endpoints.map((e) => ({ field: 'enabled', message: `Endpoint ${e.id} uses this origin as its default_origin_id` })),
    ...enabledRoutes.map((r) => ({ field: 'enabled', message: `Enabled route ${r.id} sends traffic to this origin` })),
  ]);
}

export async function createOrigin(app: OriginWriteServices, rc: RequestContext, input: OriginInput, distributionId: string | null): Promise<Origin> {
  const address = addressOf(input);
  const values = { ...ORIGIN_DEFAULTS, ...input, ...address };
  delete (values as { url?: string }).url;
  delete (values as { distribution_id?: string }).distribution_id;
  values.port ??= values.scheme === 'http' ? 80 : 443;
  if (distributionId) {
    if (!(await rc.em.findOne(Endpoint, distributionId))) {
      assertValidConfiguration([{ field: 'distribution_id', message: `Endpoint ${distributionId} does not exist` }]);
    }
  }
  await checkHost(app, values as Origin, input.url !== undefined ? 'url' : 'host');
  const origin = rc.em.create(Origin, { ...values, distribution: distributionId } as never);
  recordAudit(rc, { action: 'origin.created', resource_type: 'origin', resource_id: origin.id, changes: changesOf({}, snapshot(origin)) });
  await rc.em.flush();
  return origin;
}

export async function updateOrigin(app: OriginWriteServices, rc: RequestContext, id: string, input: OriginInput): Promise<Origin> {
  const origin = await findOrigin(rc, id);
  const before = snapshot(origin);
  const { url: _url, custom_headers: headers, ...rest } = input;
  const address = addressOf(input);
  const next = { ...rest, ...address } as Partial<Origin>;
  if (headers !== undefined) {
    // "***" (what reads show) keeps the stored value of that header.
    const stored = new Map(Object.entries(origin.custom_headers).map(([k, v]) => [k.toLowerCase(), v]));
    const problems: FieldError[] = [];
    next.custom_headers = Object.fromEntries(Object.entries(headers).map(([name, value]) => {
      if (value !== MASKED_VALUE) return [name, value];
      const kept = stored.get(name.toLowerCase());
      if (kept === undefined) problems.push({ field: `custom_headers.${name}`, message: `"${MASKED_VALUE}" keeps a stored value, but the origin has no header ${name}` });
      return [name, kept ?? ""];
    }));
    if (problems.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors: problems });
  }
  if (address.scheme !== undefined && address.port === undefined && input.url !== undefined) next.port = address.scheme === 'http' ? 80 : 443;
  const after = { ...origin, ...next } as Origin;
  if (next.host !== undefined || next.allow_private_network !== undefined || next.ssrf_protection !== undefined) {
    await checkHost(app, after, input.url !== undefined ? 'url' : 'host');
  }
  if (origin.enabled && next.enabled === false) await checkCanDisable(rc, origin);
  for (const [field, value] of Object.entries(next)) if (value !== undefined) (origin as unknown as Record<string, unknown>)[field] = value;
  const changes = changesOf(before, snapshot(origin));
  if (Object.keys(changes).length === 0) return origin;
  recordAudit(rc, { action: 'origin.updated', resource_type: 'origin', resource_id: origin.id, changes });
  await rc.em.flush();
  return origin;
}

export async function setOriginEnabled(rc: RequestContext, id: string, enabled: boolean): Promise<Origin> {
  const origin = await findOrigin(rc, id);
  if (origin.enabled === enabled) return origin;
  if (!enabled) await checkCanDisable(rc, origin);
  origin.enabled = enabled;
  recordAudit(rc, { action: enabled ? 'origin.enabled' : 'origin.disabled', resource_type: 'origin', resource_id: origin.id, changes: { enabled: { from: !enabled, to: enabled } } });
  await rc.em.flush();
  return origin;
}

/** Refused (409 RESOURCE_IN_USE) while any route or an endpoint's default_origin_id refers to it. */
export async function deleteOrigin(rc: RequestContext, id: string): Promise<void> {
  const origin = await findOrigin(rc, id);
  const { routes, enabledRoutes, endpoints } = await dependents(rc, origin);
  if (routes.length || endpoints.length) {
    const uses = [
      ...(endpoints.length ? [`the default origin of endpoint(s) ${endpoints.map((e) => e.id).join(', ')}`] : []),
      ...(routes.length ? [`the origin of ${routes.length} route(s) (${enabledRoutes.length} enabled)`] : []),
    ];
    throw resourceInUse(`The origin is ${uses.join(' and ')}; point them at another origin first`);
  }
  recordAudit(rc, { action: 'origin.deleted', resource_type: 'origin', resource_id: origin.id, changes: changesOf(snapshot(origin), {}) });
  rc.em.remove(origin);
  await rc.em.flush();
}

/**
 * Origin health (document 3 §2): the worst case over the edge nodes online now, as the control channel
 * aggregates their probes (services.cdnOriginHealth); `unknown` with nothing measured while no node reports it.
 */
export async function originHealth(services: Pick<CdnServices, 'cdnOriginHealth'>, rc: RequestContext, id: string) {
  const origin = await findOrigin(rc, id);
  const measured = await services.cdnOriginHealth?.(origin.id);
  return measured ? { origin_id: origin.id, ...measured } : {
    origin_id: origin.id, status: 'unknown' as const, latency_ms: null, last_success_at: null, last_failure_at: null,
    failure_reason: null, consecutive_failures: 0, checked_at: null,
  };
}
