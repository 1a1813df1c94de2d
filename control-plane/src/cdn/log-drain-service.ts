// Log drains, document 3 §3, §4.10 (delivery and the connectivity test are a
// later issue). Credentials of destination_config are split off and sealed
// with the secret box (bound to the drain's id); the stored destination_config
// holds the rest with each credential as MASKED_VALUE, which is what replies
// and the audit trail show; "***" on update keeps a stored credential only
// while the destination members (DESTINATION_MEMBERS) stay as they are, so a
// stored secret never follows a moved destination. Destination URLs pass the
// edge's SSRF rules at write time; endpoint_ids must name existing endpoints.
// Deleting an endpoint takes it out of every drain (detachEndpointFromDrains,
// in its transaction).
import { randomUUID } from 'node:crypto';
import { raw } from '@mikro-orm/core';
import { lineRenderer, syntheticRecord, type LogFormat } from '../../../shared/src/logs/access-record.ts';
import { batchOfLines, DeliveryError, type DrainSpec } from '../../../shared/src/logs/destination.ts';
import { createDestination } from '../../../shared/src/logs/destinations.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, found, type FieldError } from '../http/errors.ts';
import { Endpoint } from './cdn.entities.ts';
import { assertValidConfiguration, listResources, type ListOptions } from './fields.ts';
import {
  CREDENTIAL_MEMBERS, DESTINATION_MEMBERS, destinationConfigSchemas, ELASTICSEARCH_FORMATS, MAX_DRAIN_ENDPOINTS, MAX_DRAINS_PER_ENDPOINT, MAX_LOG_DRAINS, URL_MEMBERS, type CreateLogDrainInput, type DestinationConfig, type UpdateLogDrainInput,
} from './log-drain-record.ts';
import { normaliseOriginHost, originHostRefusal } from './origin-host.ts';
import { MASKED_VALUE } from './origin-record.ts';
import { LogDrain, type DestinationType } from './policies.entities.ts';
import type { CdnServices } from './services.ts';
import { parseWith } from '../http/validation.ts';

const DRAIN_FIELDS = ['name', 'destination_type', 'destination_config', 'log_format', 'fields', 'endpoint_ids', 'status', 'last_error'] as const satisfies readonly (keyof LogDrain)[];
const snapshot = (d: LogDrain) => Object.fromEntries(DRAIN_FIELDS.map((f) => [f, d[f]])) as Partial<LogDrain>;
const aad = (id: string) => `cdn_log_drain:${id}`;
type Secrets = Record<string, string | Record<string, string>>;

export async function findLogDrain(rc: RequestContext, id: string): Promise<LogDrain> {
  return found(await rc.em.findOne(LogDrain, id), 'Log drain');
}

/** The drain's credentials in clear (for delivery and the connectivity test). */
export function drainSecrets(app: Pick<CdnServices, 'secretBox'>, drain: LogDrain): Secrets {
  return JSON.parse(app.secretBox.openString(drain.destination_secrets_sealed, aad(drain.id))) as Secrets;
}

/** The drain's credentials sealed for storage (bound to its id). */
export function sealDrainSecrets(app: Pick<CdnServices, 'secretBox'>, drainId: string, secrets: Secrets): string {
  return app.secretBox.seal(JSON.stringify(secrets), aad(drainId));
}

/**
 * Splits a checked destination_config into what is shown (credentials as
 * MASKED_VALUE, header values each) and the credentials. A credential sent as
 * MASKED_VALUE takes its value from `stored` (400 when there is none).
 */
export function splitConfig(type: DestinationType, config: DestinationConfig, stored: Secrets): { shown: DestinationConfig; secrets: Secrets } {
  const shown: DestinationConfig = {};
  const secrets: Secrets = {};
  const problems: FieldError[] = [];
  const kept = (value: string, previous: string | undefined, field: string) => {
    if (value !== MASKED_VALUE) return value;
    if (previous === undefined) problems.push({ field, message: `"${MASKED_VALUE}" keeps a stored value, but none is stored` });
    return previous ?? '';
  };
  for (const [member, value] of Object.entries(config)) {
    if (!CREDENTIAL_MEMBERS[type].includes(member)) shown[member] = value;
    else if (typeof value === 'string') {
      shown[member] = MASKED_VALUE;
      secrets[member] = kept(value, typeof stored[member] === 'string' ? stored[member] : undefined, `destination_config.${member}`);
    } else {
      // A map of header values: each value masked and kept on its own (names compare case-insensitively).
      const before = new Map(Object.entries(typeof stored[member] === 'object' ? stored[member] : {}).map(([k, v]) => [k.toLowerCase(), v]));
      const entries = Object.entries(value as Record<string, string>);
      shown[member] = Object.fromEntries(entries.map(([name]) => [name, MASKED_VALUE]));
      secrets[member] = Object.fromEntries(entries.map(([name, v]) => [name, kept(v, before.get(name.toLowerCase()), `destination_config.${member}.${name}`)]));
    }
  }
  if (problems.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors: problems });
  return { shown, secrets };
}

/** The destination members whose value changes (URLs compared as parsed: `HTTPS://Host` is `https://host/`). */
function movedMembers(type: DestinationType, before: DestinationConfig, after: DestinationConfig): string[] {
  const value = (member: string, v: unknown) => (typeof v !== 'string' ? null : URL_MEMBERS[type].includes(member) && URL.canParse(v) ? new URL(v).href : v);
  return DESTINATION_MEMBERS[type].filter((member) => value(member, before[member]) !== value(member, after[member]));
}

/**
 * 422 naming each credential sent as MASKED_VALUE (header values each) when the destination moves: a kept secret
 * would be sent to the new host with the next batch and test, which is how a write access to the drain reads it.
 */
function keptCredentialProblems(type: DestinationType, before: DestinationConfig, after: DestinationConfig): FieldError[] {
  const moved = movedMembers(type, before, after);
  if (moved.length === 0) return [];
  const message = `The destination changes (${moved.map((m) => `destination_config.${m}`).join(', ')}): "${MASKED_VALUE}" keeps a stored credential `
    + 'only for an unchanged destination; send this credential in clear';
  return CREDENTIAL_MEMBERS[type].flatMap((member) => {
    const value = after[member];
    if (value === MASKED_VALUE) return [{ field: `destination_config.${member}`, message }];
    if (value === null || typeof value !== 'object') return [];
    return Object.entries(value).filter(([, v]) => v === MASKED_VALUE).map(([name]) => ({ field: `destination_config.${member}.${name}`, message }));
  });
}

/** 422 for a destination URL the control plane would not send logs to: plain http on the public network, or a refused address. */
async function urlProblems(app: CdnServices, type: DestinationType, config: DestinationConfig): Promise<FieldError[]> {
  const problems: FieldError[] = [];
  const allowPrivate = config.allow_private_network === true;
  for (const member of URL_MEMBERS[type]) {
    if (typeof config[member] !== 'string') continue;
    const field = `destination_config.${member}`;
    const url = new URL(config[member]);
    if (url.protocol === 'http:' && !allowPrivate) {
      problems.push({ field, message: 'Must be https (credentials and logs travel in it); plain http only with allow_private_network true' });
      continue;
    }
    const host = normaliseOriginHost(url.hostname);
    if (!host) {
      problems.push({ field, message: 'The host must be a DNS name or an IP address' });
      continue;
    }
    const refusal = await originHostRefusal(host, { allow_private_network: allowPrivate, ssrf_protection: true }, app.cdnHostLookup, app.config.CDN_ORIGIN_DNS_TIMEOUT_MS);
    if (!refusal) continue;
    const via = refusal.address === host ? '' : ` (it resolves to ${refusal.address})`;
    problems.push({
      field,
      message: refusal.kind === 'private'
        ? `${host} is a private-use address${via}; set allow_private_network to true to allow it`
        : `${host} is a link-local, metadata or reserved address${via}; logs are never sent there`,
    });
  }
  return problems;
}

/** 422 naming each endpoint id that does not exist. */
async function endpointProblems(rc: RequestContext, ids: readonly string[]): Promise<FieldError[]> {
  if (ids.length === 0) return [];
  const existing = new Set((await rc.em.find(Endpoint, { id: { $in: [...ids] } }, { fields: ['id'] })).map((e) => e.id));
  return ids.flatMap((id, i) => (existing.has(id) ? [] : [{ field: `endpoint_ids[${i}]`, message: `Endpoint ${id} does not exist` }]));
}

/**
 * 409 LOG_DRAIN_LIMIT_REACHED when a drain with these endpoint_ids (empty: every endpoint) would pass a cap: more
 * than MAX_LOG_DRAINS drains (on create: `drainId` null), or an endpoint receiving its logs through more than
 * MAX_DRAINS_PER_ENDPOINT drains (those naming it and those for every endpoint; the drain updated, `drainId`, left
 * out). Takes the configuration lock first (every drain write takes it), so concurrent writes cannot pass a cap together.
 */
async function assertWithinCaps(em: EntityManager, endpointIds: readonly string[], drainId: string | null): Promise<void> {
  await em.execute('select 1 from cdn_config_revision where id = 1 for no key update');
  if (drainId === null) {
    const [total] = await em.execute<{ n: number }[]>('select count(*)::int as n from cdn_log_drain');
    if (total!.n >= MAX_LOG_DRAINS) {
      throw new ApiError('LOG_DRAIN_LIMIT_REACHED', `The platform has the most log drains allowed (${MAX_LOG_DRAINS}); delete one, or send more endpoints to one drain`);
    }
  }
  const others = drainId ?? '00000000-0000-0000-0000-000000000000';
  const [every] = await em.execute<{ n: number }[]>(`select count(*)::int as n from cdn_log_drain where id <> ? and endpoint_ids = '[]'::jsonb`, [others]);
  // Per endpoint, the drains naming it: those named (or, for a drain for every endpoint, the most loaded endpoint).
  const named = await em.execute<{ endpoint_id: string; n: number }[]>(
    `select e.value as endpoint_id, count(*)::int as n from cdn_log_drain d cross join lateral jsonb_array_elements_text(d.endpoint_ids) e
     where d.id <> ? and (?::jsonb = '[]'::jsonb or e.value in (select value from jsonb_array_elements_text(?::jsonb)))
     group by e.value order by n desc, e.value limit ${endpointIds.length === 0 ? 1 : MAX_DRAIN_ENDPOINTS}`,
    [others, JSON.stringify(endpointIds), JSON.stringify(endpointIds)],
  );
  const counts = new Map(named.map((r) => [r.endpoint_id, r.n]));
  const over = (endpointId: string) => every!.n + (counts.get(endpointId) ?? 0) + 1 > MAX_DRAINS_PER_ENDPOINT;
  const problems: FieldError[] = endpointIds.length === 0
    ? (every!.n + (named[0]?.n ?? 0) + 1 > MAX_DRAINS_PER_ENDPOINT
      ? [{ field: 'endpoint_ids', message: `A drain for every endpoint would give ${named[0] ? `endpoint ${named[0].endpoint_id}` : 'each endpoint'} more than ${MAX_DRAINS_PER_ENDPOINT} drains` }]
      : [])
    : endpointIds.flatMap((id, i) => (over(id) ? [{ field: `endpoint_ids[${i}]`, message: `Endpoint ${id} already has its logs sent by the most drains allowed (${MAX_DRAINS_PER_ENDPOINT}, counting those for every endpoint)` }] : []));
  if (problems.length) throw new ApiError('LOG_DRAIN_LIMIT_REACHED', `An endpoint may have its logs sent by at most ${MAX_DRAINS_PER_ENDPOINT} drains`, { errors: problems });
}

/** Creates a drain; `distributionId` (the distribution-scoped create) is added to its endpoint_ids. */
export async function createLogDrain(app: CdnServices, rc: RequestContext, input: CreateLogDrainInput, distributionId: string | null = null): Promise<LogDrain> {
  const endpointIds = [...new Set([...(input.endpoint_ids ?? []), ...(distributionId ? [distributionId] : [])])];
  const { shown, secrets } = splitConfig(input.destination_type, input.destination_config, {});
  assertValidConfiguration([...(await endpointProblems(rc, endpointIds)), ...(await urlProblems(app, input.destination_type, input.destination_config))]);
  return rc.em.transactional(async (em) => {
    await assertWithinCaps(em, endpointIds, null);
    const id = crypto.randomUUID();
    const drain = em.create(LogDrain, {
      id, name: input.name, destination_type: input.destination_type, destination_config: shown,
      destination_secrets_sealed: app.secretBox.seal(JSON.stringify(secrets), aad(id)),
      log_format: input.log_format, fields: input.fields, endpoint_ids: endpointIds, status: 'active', last_error: null,
    } as never);
    recordAudit(rc, { action: 'log_drain.created', resource_type: 'log_drain', resource_id: drain.id, changes: changesOf({}, snapshot(drain)) }, em);
    return drain;
  });
}

export async function updateLogDrain(app: CdnServices, rc: RequestContext, id: string, input: UpdateLogDrainInput): Promise<LogDrain> {
  const drain = await findLogDrain(rc, id);
  const before = snapshot(drain);
  const { destination_config: rawConfig, ...rest } = input;
  const problems: FieldError[] = [];
  let secretsChanged: string[] = [];
  let next: { shown: DestinationConfig; secrets: Secrets } | null = null;
  if (rawConfig !== undefined) {
    const config = parseWith(destinationConfigSchemas[drain.destination_type], rawConfig, 'destination_config') as DestinationConfig;
    const stored = drainSecrets(app, drain);
    next = splitConfig(drain.destination_type, config, stored);
    problems.push(...keptCredentialProblems(drain.destination_type, drain.destination_config, config), ...(await urlProblems(app, drain.destination_type, config)));
    const secrets = next.secrets;
    secretsChanged = [...new Set([...Object.keys(stored), ...Object.keys(secrets)])]
      .filter((member) => JSON.stringify(stored[member] ?? null) !== JSON.stringify(secrets[member] ?? null));
  }
  if (rest.endpoint_ids !== undefined) problems.push(...(await endpointProblems(rc, rest.endpoint_ids)));
  if (drain.destination_type === 'elasticsearch' && rest.log_format !== undefined && !(ELASTICSEARCH_FORMATS as readonly string[]).includes(rest.log_format)) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'log_format', message: 'Elasticsearch indexes JSON documents: json or ndjson' }] });
  }
  assertValidConfiguration(problems);
  const endpointsChange = rest.endpoint_ids !== undefined && JSON.stringify(rest.endpoint_ids) !== JSON.stringify(drain.endpoint_ids);
  await rc.em.transactional(async (em) => {
    if (endpointsChange) await assertWithinCaps(em, rest.endpoint_ids!, drain.id);
    if (next) {
      drain.destination_config = next.shown;
      if (secretsChanged.length) drain.destination_secrets_sealed = app.secretBox.seal(JSON.stringify(next.secrets), aad(drain.id));
    }
    for (const [field, value] of Object.entries(rest)) if (value !== undefined) (drain as unknown as Record<string, unknown>)[field] = value;
    const changes = changesOf(before, snapshot(drain), DRAIN_FIELDS);
    if (Object.keys(changes).length === 0 && secretsChanged.length === 0) return;
    // Credentials show as "***" before and after: the entry names the ones that changed, never their values.
    recordAudit(rc, {
      action: 'log_drain.updated', resource_type: 'log_drain', resource_id: drain.id, changes,
      ...(secretsChanged.length ? { metadata: { credentials_changed: secretsChanged } } : {}),
    }, em);
  });
  return drain;
}

/**
 * Pause (active or error → paused) and resume (paused or error → active,
 * last_error cleared). Asking for the state a drain is already in answers it
 * unchanged, without an audit entry.
 */
export async function setLogDrainPaused(rc: RequestContext, id: string, paused: boolean): Promise<LogDrain> {
  const drain = await findLogDrain(rc, id);
  const target = paused ? 'paused' : 'active';
  if (drain.status === target) return drain;
  const before = snapshot(drain);
  drain.status = target;
  if (!paused) drain.last_error = null;
  recordAudit(rc, { action: paused ? 'log_drain.paused' : 'log_drain.resumed', resource_type: 'log_drain', resource_id: drain.id, changes: changesOf(before, snapshot(drain), DRAIN_FIELDS) });
  await rc.em.flush();
  return drain;
}

export async function deleteLogDrain(rc: RequestContext, id: string): Promise<void> {
  const drain = await findLogDrain(rc, id);
  recordAudit(rc, { action: 'log_drain.deleted', resource_type: 'log_drain', resource_id: drain.id, changes: changesOf(snapshot(drain), {}, DRAIN_FIELDS) });
  rc.em.remove(drain);
  await rc.em.flush();
}

const naming = (endpointId: string) => raw<symbol>((alias) => `${alias}.endpoint_ids @> ?::jsonb`, [JSON.stringify([endpointId])]);
const forEveryEndpoint = () => raw<symbol>((alias) => `${alias}.endpoint_ids = '[]'::jsonb`);

/** Drains that receive a distribution's logs: those naming it and those for every endpoint (empty endpoint_ids); oldest first. */
export async function listDistributionLogDrains(rc: RequestContext, endpointId: string, options: Omit<ListOptions, 'sort'>) {
  const where = { $or: [{ [naming(endpointId)]: [] }, { [forEveryEndpoint()]: [] }] };
  return listResources(rc, LogDrain, where, { ...options, sort: { field: 'created_at', direction: 'asc' } });
}

/**
 * Takes a deleted endpoint out of every drain's endpoint_ids, in the
 * deletion's unit of work (`em`). A drain left with no endpoint would start
 * receiving every endpoint's logs (empty means all): it is paused instead,
 * with last_error saying why.
 */
export async function detachEndpointFromDrains(rc: RequestContext, em: EntityManager, endpointId: string): Promise<number> {
  const drains = await em.find(LogDrain, { [naming(endpointId)]: [] } as never);
  for (const drain of drains) {
    const before = snapshot(drain);
    drain.endpoint_ids = drain.endpoint_ids.filter((id) => id !== endpointId);
    if (drain.endpoint_ids.length === 0) {
      drain.status = 'paused';
      drain.last_error = `Paused: its last endpoint (${endpointId}) was deleted; set endpoint_ids (empty: every endpoint) and resume`;
    }
    recordAudit(rc, {
      action: 'log_drain.updated', resource_type: 'log_drain', resource_id: drain.id, changes: changesOf(before, snapshot(drain), DRAIN_FIELDS),
      metadata: { reason: 'endpoint_deleted', endpoint_id: endpointId },
    }, em);
  }
  return drains.length;
}

/** The connectivity test's answer (document 3 §4.10): bare, error "" on success. */
export interface DrainTestResult {
  success: boolean;
  latency_ms: number;
  error: string;
}

/** Bound on the whole test (each request within it as well). */
export const DRAIN_TEST_TIMEOUT_MS = 10_000;

/**
 * Sends one synthetic record to the drain's destination now, through the client the agents use
 * (shared/src/logs) and the origins' SSRF rules at dial time, and reports how it went. Production delivery is
 * untouched: the record goes in a batch of its own, from the control plane, whatever the drain's status.
 */
export async function testLogDrain(app: CdnServices, rc: RequestContext, id: string): Promise<DrainTestResult> {
  const drain = await findLogDrain(rc, id);
  let config: Record<string, unknown>;
  try {
    config = { ...drain.destination_config, ...drainSecrets(app, drain) };
  } catch {
    return { success: false, latency_ms: 0, error: 'The drain\'s credentials cannot be decrypted (was SECRETS_KEY changed?)' };
  }
  const spec: DrainSpec = { id: drain.id, destination_type: drain.destination_type, destination_config: config, log_format: drain.log_format as LogFormat, fields: drain.fields };
  const started = performance.now();
  const signal = AbortSignal.timeout(DRAIN_TEST_TIMEOUT_MS);
  try {
    const destination = createDestination(spec, { nodeName: 'control-plane-test', timeoutMs: DRAIN_TEST_TIMEOUT_MS });
    const record = syntheticRecord('control-plane-test');
    const line = lineRenderer(destination.lineFormat, drain.fields)(record);
    await destination.send(batchOfLines(randomUUID(), [line], [record.timestamp], [record.request_id]), signal);
    return { success: true, latency_ms: Math.round(performance.now() - started), error: '' };
  } catch (error) {
    const message = error instanceof DeliveryError ? error.message : signal.aborted ? `no answer within ${DRAIN_TEST_TIMEOUT_MS} ms` : 'the destination could not be reached';
    rc.log.info({ drain_id: drain.id, destination_type: drain.destination_type, error: message }, 'log drain test failed');
    return { success: false, latency_ms: Math.round(performance.now() - started), error: message };
  }
}
