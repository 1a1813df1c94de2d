// The restore of a configuration rollback (document 3 §3, §4.12; DESIGN.md
// §5), the CDN capability's own writes to its tables: the working
// configuration tables are made to hold what a published version's snapshot
// holds. Every resource of the snapshot is upserted with its id, and the
// configuration rows the snapshot lacks are deleted, in an order the foreign
// keys accept (absent children first, then parents upserted, then children,
// then absent origins and endpoints). What the edge never sees is kept from
// the current rows, or defaulted for a re-created one (tags, descriptions, a
// signing key's name, an origin's health). Secrets are sealed again; a secret
// whose value did not change keeps its stored ciphertext, so the row does not
// change. Rows whose content is already the snapshot's are not rewritten
// (their ETags stay). Runs inside the caller's transaction (the rollback's,
// which holds the configuration lock and compiles and publishes the result in
// the same transaction): all of it or nothing.
import { X509Certificate } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type {
  ConfigSnapshot, EndpointSnapshot, LogDrainSnapshot, ResponseHeadersPolicySnapshot,
} from '../../../shared/src/config/snapshot.ts';
import { unservableReason } from '../../../shared/src/tls/servable.ts';
import { idList, ids, recordset, type Columns } from '../db/bulk.ts';
import { statusByExpiry } from './certificate-check.ts';
import { keyAad } from './domain-service.ts';
import type { DestinationConfig } from './log-drain-record.ts';
import { drainSecrets, sealDrainSecrets, splitConfig } from './log-drain-service.ts';
import type { DestinationType, LogDrain, SigningKey } from './policies.entities.ts';
import type { CdnServices } from './services.ts';
import { sealSigningSecret, signingSecrets } from './signing-key-service.ts';
import {
  cacheRuleFields, endpointFields, headerPolicyFields, ipRuleFields, logDrainFields, originFields, restoredColumns, routeFields, signingKeyFields,
  sortedKeys, toRow, type ResourceFields,
} from './snapshot-fields.ts';

type Row = Record<string, any>;
export type RestoreServices = Pick<CdnServices, 'secretBox' | 'clock'>;

/** Rows restored and removed per table (for the audit entry). */
export type RestoreCounts = Record<string, { upserted: number; deleted: number }>;

const json = (value: unknown) => JSON.stringify(value);

/** JSON text independent of object key order. */
const canonicalJson = (value: unknown) => JSON.stringify(sortedKeys(value));
/** A compared column, or an expression naming its columns as `$column`, of `alias`. */
const qualified = (item: string, alias: string) => (item.includes('$') ? item.replaceAll('$', `${alias}.`) : `${alias}.${item}`);

/**
 * `insert … on conflict (id) do update` of the rows (objects keyed by the
 * resource's restored columns): its `kept` columns take their value on insert
 * and are left alone on update; a row is rewritten only when one of `compared`
 * (columns, or expressions naming them `$column`) differs.
 */
async function upsert(
  em: EntityManager, resource: ResourceFields, rows: Row[],
  options: { updates?: Record<string, string>; compared?: string[] } = {},
): Promise<number> {
  if (!rows.length) return 0;
  const { table, kept } = resource;
  const columns: Columns = restoredColumns(resource);
  const names = Object.keys(columns);
  const insertNames = [...names, ...Object.keys(kept), 'created_at', 'updated_at', 'version'];
  const insertValues = [...names.map((n) => `x.${n}`), ...Object.values(kept), 'now()', 'now()', '1'];
  const settable = names.filter((n) => n !== 'id');
  const updates = { ...Object.fromEntries(settable.map((n) => [n, `excluded.${n}`])), ...options.updates };
  const compared = options.compared ?? settable;
  const result = await em.execute<{ n: number }[]>(
    `with up as (
       insert into ${table} (${insertNames.join(', ')})
       select ${insertValues.join(', ')} from ${recordset(columns)}
       on conflict (id) do update set ${Object.entries(updates).map(([n, v]) => `${n} = ${v}`).join(', ')}, updated_at = now(), version = ${table}.version + 1
       where (${compared.map((n) => qualified(n, table)).join(', ')}) is distinct from (${compared.map((n) => qualified(n, 'excluded')).join(', ')})
       returning 1)
     select count(*)::int as n from up`,
    [json(rows)],
  );
  return result[0]?.n ?? 0;
}

async function deleteWhere(em: EntityManager, sql: string, params: unknown[]): Promise<number> {
  const rows = await em.execute<{ n: number }[]>(`with gone as (${sql} returning 1) select count(*)::int as n from gone`, params);
  return rows[0]?.n ?? 0;
}

/**
 * Restores the working configuration to `snapshot` (validated by
 * parseConfigSnapshot) inside the transaction `em` belongs to; counts per table.
 */
export async function restoreSnapshot(app: RestoreServices, em: EntityManager, snapshot: ConfigSnapshot): Promise<RestoreCounts> {
  if (!em.isInTransaction()) throw new Error('restoreSnapshot runs inside the caller\'s transaction');
  const endpoints = snapshot.endpoints;
  const all = <T>(pick: (e: EndpointSnapshot) => T[]) => endpoints.flatMap((e) => pick(e).map((item) => ({ endpoint: e, item })));
  const origins = all((e) => e.origins);
  const routes = all((e) => e.routes);
  const cacheRules = all((e) => e.cache_rules);
  const ipRules = all((e) => e.ip_rules);
  const signingKeys = all((e) => e.signing_keys);
  const domains = all((e) => e.custom_domains);
  // Endpoints whose entry lists signing keys had token authentication on; the others' keys are not in the snapshot and are kept.
  const tokenAuth = endpoints.filter((e) => e.signing_keys.length > 0).map((e) => e.id);
  const counts: RestoreCounts = {};
  const count = (table: string, upserted: number, deleted: number) => (counts[table] = { upserted, deleted });

  // 1. Children absent from the snapshot go first (a route holds its origin; unique (endpoint, cidr) and hostnames must be free).
  const deletedRoutes = await deleteWhere(em, `delete from cdn_route where not (id = any(${idList}))`, [ids(routes.map((r) => r.item.id))]);
  const deletedRules = await deleteWhere(em, `delete from cdn_cache_rule where not (id = any(${idList}))`, [ids(cacheRules.map((r) => r.item.id))]);
  const deletedIpRules = await deleteWhere(em, `delete from cdn_ip_rule where not (id = any(${idList}))`, [ids(ipRules.map((r) => r.item.id))]);
  // A kept rule whose (endpoint, cidr) moved is re-inserted, so rules that swapped CIDRs cannot collide on the unique index.
  await deleteWhere(em, `delete from cdn_ip_rule r using ${recordset({ id: 'uuid', endpoint_id: 'uuid', cidr: 'text' })} where r.id = x.id and (r.endpoint_id, r.cidr) is distinct from (x.endpoint_id, x.cidr)`,
    [json(ipRules.map(({ endpoint, item }) => ({ id: item.id, endpoint_id: endpoint.id, cidr: item.cidr })))]);
  const deletedKeys = await deleteWhere(
    em, `delete from cdn_signing_key where endpoint_id = any(${idList}) and not (id = any(${idList}))`, [ids(tokenAuth), ids(signingKeys.map((k) => k.item.id))],
  );
  // Only validated domains are in a snapshot (issue 21 item 7): claims still waiting for validation are not configuration and stay.
  const hostnames = domains.map((d) => d.item.hostname.toLowerCase());
  const deletedDomains = await deleteWhere(
    em, `delete from cdn_custom_domain where certificate_pem is not null and not (lower(hostname) = any(array(select jsonb_array_elements_text(?::jsonb))))`, [json(hostnames)],
  );

  // 2. Endpoints, then what refers to them.
  const upsertedEndpoints = await upsert(em, endpointFields, endpoints.map((e) => toRow(endpointFields, e)), {
    // Enabled stays as it is (deploying or active), disabled follows the snapshot.
    updates: { status: `case when excluded.status = 'disabled' then 'disabled' when cdn_endpoint.status = 'disabled' then 'deploying' else cdn_endpoint.status end` },
    compared: Object.keys(restoredColumns(endpointFields)).filter((c) => c !== 'id').map((c) => (c === 'status' ? `($status = 'disabled')` : c)),
  });

  const children = (resource: ResourceFields, items: { endpoint: EndpointSnapshot; item: Row }[]) => items.map(({ endpoint, item }) => toRow(resource, item, endpoint));
  const upsertedOrigins = await upsert(em, originFields, children(originFields, origins));
  const upsertedRoutes = await upsert(em, routeFields, children(routeFields, routes));
  count('cdn_route', upsertedRoutes, deletedRoutes);
  const upsertedRules = await upsert(em, cacheRuleFields, children(cacheRuleFields, cacheRules));
  count('cdn_cache_rule', upsertedRules, deletedRules);
  const upsertedIpRules = await upsert(em, ipRuleFields, children(ipRuleFields, ipRules));
  count('cdn_ip_rule', upsertedIpRules, deletedIpRules);

  count('cdn_signing_key', await restoreSigningKeys(app, em, signingKeys), deletedKeys);
  count('cdn_custom_domain', await restoreDomains(app, em, domains), deletedDomains);

  // 3. Origins and endpoints the snapshot lacks (their routes are gone; free origins, used by no endpoint, are not configuration and stay).
  const deletedOrigins = await deleteWhere(
    em, `delete from cdn_origin where distribution_id is not null and not (id = any(${idList}))`, [ids(origins.map((o) => o.item.id))],
  );
  count('cdn_origin', upsertedOrigins, deletedOrigins);
  const deletedEndpoints = await deleteWhere(em, `delete from cdn_endpoint where not (id = any(${idList}))`, [ids(endpoints.map((e) => e.id))]);
  count('cdn_endpoint', upsertedEndpoints, deletedEndpoints);

  // 4. Policies and drains (endpoints and routes name policies without a foreign key).
  count('cdn_response_headers_policy', await restorePolicies(em, snapshot.response_headers_policies),
    await deleteWhere(em, `delete from cdn_response_headers_policy where not (id = any(${idList}))`, [ids(snapshot.response_headers_policies.map((p) => p.id))]));
  count('cdn_log_drain', await restoreDrains(app, em, snapshot.log_drains),
    await deleteWhere(em, `delete from cdn_log_drain where not (id = any(${idList}))`, [ids(snapshot.log_drains.map((d) => d.id))]));
  return counts;
}

async function currentRows(em: EntityManager, table: string, columns: string, idsOf: string[]): Promise<Map<string, Row>> {
  if (!idsOf.length) return new Map();
  const rows = await em.execute<Row[]>(`select ${columns} from ${table} where id = any(${idList})`, [ids(idsOf)]);
  return new Map(rows.map((r) => [r.id as string, r]));
}

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

async function restoreSigningKeys(app: RestoreServices, em: EntityManager, keys: { endpoint: EndpointSnapshot; item: EndpointSnapshot['signing_keys'][number] }[]): Promise<number> {
  const current = await currentRows(em, 'cdn_signing_key', 'id, secret_sealed, retired_secrets', keys.map((k) => k.item.id));
  const rows = keys.map(({ endpoint, item }) => {
    const [first, ...older] = item.secrets;
    const stored = current.get(item.id);
    let secretSealed: string | undefined;
    let retired: { secret_sealed: string; valid_until: string }[] | undefined;
    if (stored) {
      try {
        // Unchanged secrets keep their ciphertext (a new seal would differ every time).
        if (sameJson(signingSecrets(app as CdnServices, stored as SigningKey), item.secrets)) {
          secretSealed = stored.secret_sealed;
          retired = stored.retired_secrets;
        }
      } catch {
        // unreadable: sealed again below
      }
    }
    secretSealed ??= sealSigningSecret(app, item.id, first!.secret);
    retired ??= older.filter((s) => s.valid_until !== null).map((s) => ({ secret_sealed: sealSigningSecret(app, item.id, s.secret), valid_until: s.valid_until! }));
    return toRow(signingKeyFields, item, endpoint, { secret_sealed: secretSealed, retired_secrets: retired });
  });
  return upsert(em, signingKeyFields, rows);
}

/**
 * Custom domains are matched by hostname (the snapshot names no id). The
 * validated claim of a hostname (issue 21 item 7: one at most) that still
 * exists moves to the snapshot's endpoint and keeps its current certificate:
 * certificates are issued and renewed, not configured, and a rollback must not
 * bring back an older one or take a valid one away. A domain deleted since is
 * re-created: with the snapshot's certificate as a custom one (validated), or,
 * without one (a snapshot from before only validated claims were published),
 * as a managed domain waiting for validation. An unvalidated claim of the
 * hostname by the snapshot's endpoint gives way to the restored one; other
 * endpoints' unvalidated claims are taken over as by a validation.
 */
async function restoreDomains(app: RestoreServices, em: EntityManager, domains: { endpoint: EndpointSnapshot; item: EndpointSnapshot['custom_domains'][number] }[]): Promise<number> {
  if (!domains.length) return 0;
  const current = await em.execute<{ id: string; hostname: string; endpoint_id: string; validated: boolean }[]>(
    `select id, lower(hostname) as hostname, endpoint_id, certificate_pem is not null as validated from cdn_custom_domain
     where lower(hostname) = any(array(select jsonb_array_elements_text(?::jsonb)))`,
    [json(domains.map((d) => d.item.hostname.toLowerCase()))],
  );
  const validatedClaim = new Map(current.filter((d) => d.validated).map((d) => [d.hostname, d]));
  const claimOf = (endpointId: string, hostname: string) => current.find((d) => !d.validated && d.endpoint_id === endpointId && d.hostname === hostname);
  const moves: { id: string; endpoint_id: string }[] = [];
  const created: Row[] = [];
  const givingWay: string[] = [];
  const now = app.clock.now();
  for (const { endpoint, item } of domains) {
    const hostname = item.hostname.toLowerCase();
    const existing = validatedClaim.get(hostname);
    const own = claimOf(endpoint.id, hostname);
    if (existing) {
      if (existing.endpoint_id !== endpoint.id) {
        if (own) givingWay.push(own.id);
        moves.push({ id: existing.id, endpoint_id: endpoint.id });
      }
      continue;
    }
    // A certificate the edge cannot serve (stored before the check refused it) is not brought back: the domain
    // returns as a managed one waiting for validation, saying why (or its claim made since stays).
    const unservable = item.certificate_pem && item.private_key_pem ? unservableReason(item.certificate_pem, item.private_key_pem) : undefined;
    const withCertificate = Boolean(item.certificate_pem && item.private_key_pem) && !unservable;
    if (own && !withCertificate) continue; // an old snapshot's unvalidated domain, claimed again since
    if (own) givingWay.push(own.id);
    const id = crypto.randomUUID();
    const base = {
      id, endpoint_id: endpoint.id, hostname: item.hostname, certificate_expires_at: null, certificate_issuer: null, certificate_fingerprint: null,
      certificate_pem: null, private_key_sealed: null, dns_validation: null, validation_error: null,
    };
    if (withCertificate) {
      const cert = new X509Certificate(item.certificate_pem!);
      const expires = new Date(cert.validTo);
      created.push({
        ...base, certificate_source: 'custom', certificate_status: statusByExpiry(expires, now), certificate_expires_at: expires.toISOString(),
        certificate_issuer: 'custom', certificate_fingerprint: cert.fingerprint256, certificate_pem: item.certificate_pem,
        private_key_sealed: app.secretBox.seal(item.private_key_pem!, keyAad(id)),
      });
    } else {
      created.push({
        ...base, certificate_source: 'managed', certificate_status: 'pending_validation',
        dns_validation: { cname_name: item.hostname, cname_value: endpoint.hostname, acme_challenge_name: `_acme-challenge.${item.hostname}`, acme_challenge_value: '' },
        validation_error: unservable
          ? `Re-created by a configuration rollback without its certificate (${unservable.replace(/\.$/, '')}): retry validation to issue a managed one`.slice(0, 500)
          : 'Re-created by a configuration rollback: retry validation to issue its certificate',
      });
    }
  }
  if (givingWay.length) await em.execute(`delete from cdn_custom_domain where id = any(${idList})`, [ids(givingWay)]);
  if (moves.length) {
    await em.execute(`update cdn_custom_domain d set endpoint_id = x.endpoint_id, updated_at = now(), version = d.version + 1
      from ${recordset({ id: 'uuid', endpoint_id: 'uuid' })} where d.id = x.id`, [json(moves)]);
  }
  if (created.length) {
    await em.execute(`insert into cdn_custom_domain (id, endpoint_id, hostname, certificate_source, certificate_status, certificate_expires_at, certificate_issuer,
        certificate_fingerprint, certificate_pem, private_key_sealed, dns_validation, validation_error, created_at, updated_at, version)
      select x.*, now(), now(), 1 from ${recordset({
        id: 'uuid', endpoint_id: 'uuid', hostname: 'varchar', certificate_source: 'text', certificate_status: 'text', certificate_expires_at: 'timestamptz',
        certificate_issuer: 'text', certificate_fingerprint: 'varchar', certificate_pem: 'text', private_key_sealed: 'text', dns_validation: 'jsonb', validation_error: 'varchar',
      })}`, [json(created)]);
    // Validated by the restore: the other endpoints' unvalidated claims of those names are taken over.
    const restored = created.filter((d) => d.certificate_pem !== null);
    if (restored.length) {
      await em.execute(`update cdn_custom_domain d set certificate_status = 'failed', acme_order = null, updated_at = now(), version = d.version + 1,
          validation_error = 'Taken over: ' || d.hostname || ' was validated for another endpoint (a configuration rollback restored it there), which serves it now'
        from ${recordset({ id: 'uuid', hostname: 'varchar' })} where d.hostname = x.hostname and d.id <> x.id and d.certificate_pem is null`,
      [json(restored.map((d) => ({ id: d.id, hostname: d.hostname })))]);
    }
  }
  return moves.length + created.length;
}

async function restorePolicies(em: EntityManager, policies: ResponseHeadersPolicySnapshot[]): Promise<number> {
  return upsert(em, headerPolicyFields, policies.map((p) => toRow(headerPolicyFields, p)));
}

/** Drains: credentials split off the snapshot's destination_config and sealed again unless unchanged. */
async function restoreDrains(app: RestoreServices, em: EntityManager, drains: LogDrainSnapshot[]): Promise<number> {
  const current = await currentRows(em, 'cdn_log_drain', 'id, destination_type, destination_secrets_sealed', drains.map((d) => d.id));
  const rows = drains.map((d) => {
    const type = d.destination_type as DestinationType;
    const { shown, secrets } = splitConfig(type, d.destination_config as DestinationConfig, {});
    const stored = current.get(d.id);
    let sealed: string | undefined;
    if (stored && stored.destination_type === type) {
      try {
        if (canonicalJson(drainSecrets(app, stored as LogDrain)) === canonicalJson(secrets)) sealed = stored.destination_secrets_sealed;
      } catch {
        // unreadable: sealed again below
      }
    }
    return toRow(logDrainFields, d, {}, { destination_config: shown, destination_secrets_sealed: sealed ?? sealDrainSecrets(app, d.id, secrets) });
  });
  return upsert(em, logDrainFields, rows);
}
