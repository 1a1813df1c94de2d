// Configuration versions (document 3 §3, §4.12; DESIGN.md §5, §7): validate
// (a draft, valid or invalid, nothing published), publish (422 and no change
// when invalid), roll back (restore a superseded version's configuration and
// publish it as a new version) and the automatic publish of
// CDN_PUBLISH_MODE=auto. Every path that compiles first takes the
// configuration lock (the cdn_config_revision row that every write to a
// configuration table locks first, migration 0021), so it reads one
// consistent configuration and knows the revision it compiled.
//
// A publish builds the manifest from the active one: a resource whose sha256
// is unchanged keeps the version it last changed in; the others take the new
// version, and an endpoint whose resource changed goes back to `deploying`
// (the control channel moves it to `active` once every online node has
// applied a version that far). After the commit the version is announced on
// CONFIG_PUBLISHED_CHANNEL and the replaced version's propagation counts are
// frozen.
import { DeadlockException } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { assembleSnapshot, configDigest, parseResourceKey } from '../../../shared/src/config/resources.ts';
import { parseConfigSnapshot, type ConfigSnapshot } from '../../../shared/src/config/snapshot.ts';
import { recordAudit } from '../audit/audit.ts';
import { inTransaction, systemContext, type RequestContext } from '../core/request-context.ts';
import { idList, ids } from '../db/bulk.ts';
import { ApiError, conflict, found } from '../http/errors.ts';
import { paginate } from '../http/paging.ts';
import { restoreSnapshot } from '../cdn/index.ts';
import { compileConfiguration, type CompiledConfiguration } from './config-compiler.ts';
import { ConfigVersion, type ConfigVersionStatus, type ValidationProblem } from './config-entities.ts';
import { manifestToStored, type ConfigStore } from './config-store.ts';
import { CONFIG_PUBLISHED_CHANNEL, type ManifestEntry, type PropagationCounts, type PublishedVersion } from './contracts.ts';
import type { CdnConfigServices } from './services.ts';

/** How long a publish, validate or rollback waits for configuration writes in flight before 409. */
export const CONFIG_LOCK_TIMEOUT_MS = 10_000;
const AUTO_DESCRIPTION = 'Published automatically after configuration changes';

/** What the configuration side needs: the platform's services and its own store (services.edgeConfig). */
export type ConfigServices = Pick<CdnConfigServices, 'db' | 'log' | 'clock' | 'config' | 'secretBox' | 'edgeConfig' | 'edgeFleet'> & {
  /** Only to announce a published version (CONFIG_PUBLISHED_CHANNEL); a command run outside a control plane has no more. */
  store: Pick<CdnConfigServices['store'], 'publish'>;
};

export function configStore(app: Pick<CdnConfigServices, 'edgeConfig'>): ConfigStore {
  return app.edgeConfig as ConfigStore;
}

const NO_NODES: PropagationCounts = { total_nodes: 0, synced_nodes: 0, pending_nodes: 0, failed_nodes: 0 };

/** Live counts from the channel's FleetView (zero until the channel is running). */
async function liveCounts(app: ConfigServices, versionNumber: number): Promise<PropagationCounts> {
  return app.edgeFleet ? app.edgeFleet.propagation(versionNumber) : NO_NODES;
}

interface RevisionLock { revision: number; compiled: number }

const DEADLOCK_ATTEMPTS = 3;

/**
 * Runs a configuration transaction again when PostgreSQL broke a deadlock by
 * aborting it: the publisher holds the configuration lock and then updates
 * version rows, which another transaction (the channel's bookkeeping) may
 * hold while it waits to write an endpoint. The work is all in the
 * transaction, so running it again is safe.
 */
async function retryingDeadlocks<T>(work: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (!(error instanceof DeadlockException) || attempt >= DEADLOCK_ATTEMPTS) throw error;
    }
  }
}

/**
 * Takes the configuration lock in the transaction `em` belongs to: waits for
 * writes in flight (409 after CONFIG_LOCK_TIMEOUT_MS), or with `skipLocked`
 * answers null at once when someone holds it.
 */
async function lockConfiguration(em: EntityManager, skipLocked = false): Promise<RevisionLock | null> {
  await em.execute(`set local lock_timeout = ${CONFIG_LOCK_TIMEOUT_MS}`);
  try {
    const rows = await em.execute<RevisionLock[]>(
      `select revision::float8 as revision, compiled_revision::float8 as compiled from cdn_config_revision where id = 1 for no key update${skipLocked ? ' skip locked' : ''}`,
    );
    return rows[0] ?? null;
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') throw conflict('Another configuration change is in progress; retry');
    throw error;
  }
}

/** Records that the configuration at its current revision has been compiled; the revision. */
async function markCompiled(em: EntityManager): Promise<number> {
  const rows = await em.execute<{ revision: number }[]>(`update cdn_config_revision set compiled_revision = revision where id = 1 returning revision::float8 as revision`);
  return rows[0]!.revision;
}

async function nextVersionNumber(em: EntityManager): Promise<number> {
  const rows = await em.execute<{ n: number }[]>(`select nextval('cdn_config_version_number_seq')::float8 as n`);
  return rows[0]!.n;
}

export const invalidConfigurationError = (problems: ValidationProblem[]) => new ApiError(
  'INVALID_CONFIGURATION', `The configuration is invalid (${problems.length} problem${problems.length === 1 ? '' : 's'}); nothing was published`,
  { errors: problems.map((p) => ({ field: `${p.resource_type}/${p.resource_id}`, message: p.message })), details: { validation_errors: problems } },
);

const digestOf = (compiled: CompiledConfiguration) => configDigest(compiled.resources.map((r) => [r.key, r.sha256]));

/** True when the compiled resources are exactly those of `active` (none when there is no active version). */
function sameAsActive(compiled: CompiledConfiguration, active: PublishedVersion | null): boolean {
  if (!active) return compiled.resources.length === 0;
  if (active.manifest.size !== compiled.resources.length) return false;
  return compiled.resources.every((r) => active.manifest.get(r.key)?.sha256 === r.sha256);
}

interface PublishOptions {
  description: string;
  publishedBy: string | null;
  /** What the replaced active version becomes. */
  replacedStatus: 'superseded' | 'rolled_back';
  rollback?: { targetId: string; reason: string | null };
}

interface Published {
  version: ConfigVersion;
  published: PublishedVersion;
  replaced: PublishedVersion | null;
}

/** Publishes compiled (valid) resources as the new active version, inside the locked transaction. */
async function publishCompiled(app: ConfigServices, tx: RequestContext, compiled: CompiledConfiguration, active: PublishedVersion | null, options: PublishOptions): Promise<Published> {
  const store = configStore(app);
  const number = await nextVersionNumber(tx.em);
  const manifest = new Map<string, ManifestEntry>();
  const changedEndpoints: string[] = [];
  for (const r of compiled.resources) {
    const before = active?.manifest.get(r.key);
    const unchanged = before?.sha256 === r.sha256;
    manifest.set(r.key, { version: unchanged ? before!.version : number, sha256: r.sha256 });
    const parsed = unchanged ? null : parseResourceKey(r.key);
    if (parsed?.type === 'endpoint') changedEndpoints.push(parsed.id);
  }
  await store.storeBodies(tx.em, compiled.resources, active?.manifest ?? null);
  if (active) {
    await tx.em.execute(`update cdn_config_version set status = ?, updated_at = now(), version = version + 1 where id = ?`, [options.replacedStatus, active.id]);
  }
  // A changed endpoint has to reach the edge again (the channel moves it back to active, or to error while a node refuses it);
  // its status is not configuration.
  if (changedEndpoints.length) {
    await tx.em.execute(`update cdn_endpoint set status = 'deploying', status_reason = null where status in ('active', 'error') and id = any(${idList})`, [ids(changedEndpoints)]);
  }
  const revision = await markCompiled(tx.em);
  const digest = digestOf(compiled);
  const now = app.clock.now();
  const version = tx.em.create(ConfigVersion, {
    version_number: number, description: options.description, status: 'active', validation_errors: [], manifest: manifestToStored(manifest), digest,
    resource_count: manifest.size, config_revision: revision, propagation_final: null, propagation_completed_at: null, published_by: options.publishedBy,
    published_at: now, rollback_target_id: options.rollback?.targetId ?? null, rollback_reason: options.rollback?.reason ?? null,
  } as never);
  await tx.em.flush();
  return { version, published: { id: version.id, version: number, manifest, digest }, replaced: active };
}

/** After the commit: cache the manifest, freeze the replaced version's counts, announce the new version. Never throws. */
async function afterPublish(app: ConfigServices, result: Published): Promise<void> {
  configStore(app).remember(result.published);
  try {
    if (result.replaced) {
      const counts = await liveCounts(app, result.replaced.version);
      const em = app.db.orm.em.fork() as EntityManager;
      await em.execute(`update cdn_config_version set propagation_final = ?::jsonb where id = ? and propagation_final is null`, [JSON.stringify(counts), result.replaced.id]);
    }
  } catch (error) {
    app.log.warn({ err: error, version: result.replaced?.version }, 'could not freeze the propagation counts of the replaced configuration version');
  }
  try {
    await app.store.publish(CONFIG_PUBLISHED_CHANNEL, JSON.stringify({ version: result.published.version }));
  } catch (error) {
    // Agents still get the version: the channel also compares versions when they (re)connect.
    app.log.warn({ err: error, version: result.published.version }, 'could not announce the published configuration version');
  }
}

const actorId = (rc: RequestContext) => (rc.actor && rc.actor.type !== 'system' ? rc.actor.id : null);

/** Validate: compiles and checks the working configuration into a draft (valid or invalid); publishes nothing. */
export async function validateConfiguration(app: ConfigServices, rc: RequestContext, description: string): Promise<ConfigVersion> {
  return retryingDeadlocks(() => inTransaction(rc, async (tx) => {
    const lock = (await lockConfiguration(tx.em))!;
    const compiled = await compileConfiguration(app, tx.em);
    const draft = tx.em.create(ConfigVersion, {
      version_number: await nextVersionNumber(tx.em), description, status: compiled.problems.length ? 'invalid' : 'valid', validation_errors: compiled.problems,
      manifest: null, digest: digestOf(compiled), resource_count: compiled.resources.length, config_revision: lock.revision, propagation_final: null,
      propagation_completed_at: null, published_by: null, published_at: null, rollback_target_id: null, rollback_reason: null,
    } as never);
    await tx.em.flush();
    return draft;
  }));
}

/** Publish: the working configuration as the new active version; 422 with its problems, and no change, when invalid. */
export async function publishConfiguration(app: ConfigServices, rc: RequestContext, description: string): Promise<ConfigVersion> {
  const result = await retryingDeadlocks(() => inTransaction(rc, async (tx) => {
    await lockConfiguration(tx.em);
    const compiled = await compileConfiguration(app, tx.em);
    if (compiled.problems.length) throw invalidConfigurationError(compiled.problems);
    const active = await configStore(app).activeIn(tx.em);
    const published = await publishCompiled(app, tx, compiled, active, { description, publishedBy: actorId(rc), replacedStatus: 'superseded' });
    recordAudit(tx, {
      action: 'config.published', resource_type: 'config_version', resource_id: published.version.id,
      metadata: { version_number: published.version.version_number, previous_version_number: active?.version ?? null, resource_count: published.version.resource_count },
    });
    await tx.em.flush();
    return published;
  }));
  await afterPublish(app, result);
  return result.version;
}

/** The snapshot of a published version, read back from its bodies (checked by the shared schema). */
async function snapshotOf(app: ConfigServices, version: PublishedVersion): Promise<ConfigSnapshot> {
  const store = configStore(app);
  const bodies = await store.bodies([...version.manifest.values()].map((e) => e.sha256));
  const decoder = new TextDecoder();
  const resources: [string, unknown][] = [];
  for (const [key, entry] of version.manifest) {
    const body = bodies.get(entry.sha256);
    if (!body) throw new ApiError('CONFLICT', `Version ${version.version} cannot be restored: a resource body is missing`);
    resources.push([key, JSON.parse(decoder.decode(body))]);
  }
  try {
    return parseConfigSnapshot(assembleSnapshot(version.version, resources));
  } catch {
    throw new ApiError('CONFLICT', `Version ${version.version} cannot be restored: its snapshot no longer passes the configuration schema`);
  }
}

/**
 * Rollback: restores the working configuration to a superseded version's
 * snapshot and publishes it as a new version; the version that was active
 * becomes rolled_back. 404 for an unknown target, 409 for a target that is
 * not superseded. Audit-logged.
 */
export async function rollbackConfiguration(app: ConfigServices, rc: RequestContext, targetId: string, reason: string | null): Promise<ConfigVersion> {
  const target = found(await rc.em.findOne(ConfigVersion, targetId), 'Configuration version');
  const notSuperseded = (status: string) => conflict(`Only a superseded version can be rolled back to; version ${target.version_number} is ${status}`);
  if (target.status !== 'superseded') throw notSuperseded(target.status);
  // Bodies are immutable: read before the transaction (on the embedded database it holds the only connection).
  const published = await configStore(app).version(target.version_number);
  if (!published) throw notSuperseded(target.status);
  const snapshot = await snapshotOf(app, published);
  const result = await retryingDeadlocks(() => inTransaction(rc, async (tx) => {
    await lockConfiguration(tx.em);
    const [row] = await tx.em.execute<{ status: string }[]>(`select status from cdn_config_version where id = ?`, [targetId]);
    if (row?.status !== 'superseded') throw notSuperseded(row?.status ?? 'gone');
    const restored = await restoreSnapshot(app, tx.em, snapshot);
    const compiled = await compileConfiguration(app, tx.em);
    if (compiled.problems.length) throw invalidConfigurationError(compiled.problems);
    const active = await configStore(app).activeIn(tx.em);
    const description = `Rollback to version ${target.version_number}${reason ? `: ${reason}` : ''}`.slice(0, 500);
    const done = await publishCompiled(app, tx, compiled, active, {
      description, publishedBy: actorId(rc), replacedStatus: 'rolled_back', rollback: { targetId, reason },
    });
    recordAudit(tx, {
      action: 'config.rolled_back', resource_type: 'config_version', resource_id: done.version.id, reason,
      metadata: {
        target_version_id: targetId, target_version_number: target.version_number, version_number: done.version.version_number,
        rolled_back_version_number: active?.version ?? null, restored,
      },
    });
    await tx.em.flush();
    return done;
  }));
  await afterPublish(app, result);
  return result.version;
}

export type AutoPublishOutcome = 'busy' | 'current' | 'unchanged' | 'invalid' | 'published';

/**
 * CDN_PUBLISH_MODE=auto: when the configuration revision moved past the last
 * compile, compiles and publishes, unless the result is the active version's
 * resources (a status change, a no-op write). The lock makes one replica do
 * it; the others skip their turn ('busy') or find it done ('current').
 */
export async function autoPublish(app: ConfigServices): Promise<AutoPublishOutcome> {
  const rc = systemContext(app, { requestId: `config-auto-${crypto.randomUUID()}` });
  let result: Published | null = null;
  const outcome = await retryingDeadlocks(() => inTransaction(rc, async (tx): Promise<AutoPublishOutcome> => {
    result = null;
    const lock = await lockConfiguration(tx.em, true);
    if (!lock) return 'busy';
    if (lock.revision === lock.compiled) return 'current';
    const compiled = await compileConfiguration(app, tx.em);
    if (compiled.problems.length) {
      // Writes are checked when made; this is a change from elsewhere (a job, SQL). Publish again once a write fixes it.
      tx.log.warn({ problems: compiled.problems.slice(0, 20), count: compiled.problems.length }, 'the configuration is invalid: not published');
      await markCompiled(tx.em);
      return 'invalid';
    }
    const active = await configStore(app).activeIn(tx.em);
    if (sameAsActive(compiled, active)) {
      await markCompiled(tx.em);
      return 'unchanged';
    }
    result = await publishCompiled(app, tx, compiled, active, { description: AUTO_DESCRIPTION, publishedBy: null, replacedStatus: 'superseded' });
    return 'published';
  }));
  if (result) await afterPublish(app, result);
  return outcome;
}

/** The revision counter as it stands (the auto publisher's cheap look). */
export async function readRevision(em: EntityManager): Promise<RevisionLock> {
  const rows = await em.execute<RevisionLock[]>(`select revision::float8 as revision, compiled_revision::float8 as compiled from cdn_config_revision where id = 1`);
  return rows[0]!;
}

export async function findVersion(rc: RequestContext, id: string): Promise<ConfigVersion> {
  return found(await rc.em.findOne(ConfigVersion, id), 'Configuration version');
}

export async function listVersions(rc: RequestContext, filters: { status?: ConfigVersionStatus }, page: { cursor?: string; limit: number }) {
  return paginate(rc.em, ConfigVersion, {
    where: filters.status ? { status: filters.status } : {}, limit: page.limit, cursor: page.cursor, sort: { field: 'version_number', direction: 'desc' },
  });
}

/** Versions with their propagation_status: live for the active one, frozen for those it replaced, zero for drafts. */
export async function withPropagation(app: ConfigServices, versions: ConfigVersion[]) {
  return Promise.all(versions.map(async (v) => {
    let counts = NO_NODES;
    if (v.status === 'active' || ((v.status === 'superseded' || v.status === 'rolled_back') && !v.propagation_final)) counts = await liveCounts(app, v.version_number);
    else if (v.propagation_final) counts = v.propagation_final;
    return { ...v, id: v.id, version: v.version, propagation_status: { ...counts, completed_at: v.propagation_completed_at } };
  }));
}
