// Where published versions and resource bodies are read and written, and the
// ConfigSource the control channel diffs and pushes from (contracts.ts).
// Bodies are content-addressed (cdn_config_resource, keyed by sha256): a
// publish stores only the bodies no version holds yet, sealed by the secret
// box (AAD: table and sha256) because they carry signing secrets, private
// keys and drain credentials. Published versions are immutable, so their
// manifests are kept in a small LRU; unsealed bodies in one bounded by bytes.
import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { EncodedResource } from '../../../shared/src/config/resources.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { Database } from '../db/orm.ts';
import { recordset } from '../db/bulk.ts';
import type { StoredManifest } from './config-entities.ts';
import type { ConfigSource, Manifest, ManifestEntry, PublishedVersion } from './contracts.ts';

/** Statuses of versions that were published (they have a manifest and bodies). */
export const PUBLISHED_STATUSES = ['active', 'superseded', 'rolled_back'] as const;
const PUBLISHED_SQL = PUBLISHED_STATUSES.map((s) => `'${s}'`).join(', ');

const MANIFESTS_CACHED = 8;
const BODY_CACHE_BYTES = 64 * 1024 * 1024;
/** Bodies per insert statement (each travels JSON-encoded in one parameter). */
const INSERT_BATCH = 1000;

const bodyAad = (sha256: string) => `cdn_config_resource:${sha256}`;
const shaList = `array(select jsonb_array_elements_text(?::jsonb))`;

export function manifestFromStored(stored: StoredManifest): Map<string, ManifestEntry> {
  const manifest = new Map<string, ManifestEntry>();
  for (const key of Object.keys(stored).sort()) {
    const [version, sha256] = stored[key]!;
    manifest.set(key, { version, sha256 });
  }
  return manifest;
}

export function manifestToStored(manifest: Manifest): StoredManifest {
  const stored: StoredManifest = {};
  for (const [key, entry] of manifest) stored[key] = [entry.version, entry.sha256];
  return stored;
}

export interface ConfigStoreServices {
  db: Database;
  secretBox: SecretBox;
  log: Logger;
}

export class ConfigStore implements ConfigSource {
  readonly #app: ConfigStoreServices;
  readonly #versions = new LRUCache<number, PublishedVersion>({ max: MANIFESTS_CACHED });
  readonly #bodies = new LRUCache<string, Uint8Array>({ maxSize: BODY_CACHE_BYTES, sizeCalculation: (body) => Math.max(1, body.length) });

  constructor(app: ConfigStoreServices) {
    this.#app = app;
  }

  #em(): EntityManager {
    return this.#app.db.orm.em.fork() as EntityManager;
  }

  async active(): Promise<PublishedVersion | null> {
    return this.activeIn(this.#em());
  }

  async version(versionNumber: number): Promise<PublishedVersion | null> {
    return this.versionIn(this.#em(), versionNumber);
  }

  async bodies(sha256s: readonly string[]): Promise<Map<string, Uint8Array>> {
    return this.bodiesIn(this.#em(), sha256s);
  }

  /** The active version read through `em` (inside a transaction: its own connection). */
  async activeIn(em: EntityManager): Promise<PublishedVersion | null> {
    const rows = await em.execute<{ n: number }[]>(`select version_number::float8 as n from cdn_config_version where status = 'active'`);
    return rows[0] ? this.versionIn(em, rows[0].n) : null;
  }

  /** A published version read through `em`, from the cache when it holds it. */
  async versionIn(em: EntityManager, versionNumber: number): Promise<PublishedVersion | null> {
    if (!Number.isSafeInteger(versionNumber) || versionNumber < 1) return null;
    const cached = this.#versions.get(versionNumber);
    if (cached) return cached;
    const rows = await em.execute<{ id: string; digest: string; manifest: StoredManifest | null }[]>(
      `select id, digest, manifest from cdn_config_version where version_number = ? and status in (${PUBLISHED_SQL})`, [versionNumber],
    );
    const row = rows[0];
    if (!row?.manifest) return null;
    const published: PublishedVersion = { id: row.id, version: versionNumber, manifest: manifestFromStored(row.manifest), digest: row.digest };
    this.#versions.set(versionNumber, published);
    return published;
  }

  /** Bodies by sha256 read through `em`; unknown ones are absent. */
  async bodiesIn(em: EntityManager, sha256s: readonly string[]): Promise<Map<string, Uint8Array>> {
    const out = new Map<string, Uint8Array>();
    const missing: string[] = [];
    for (const sha of new Set(sha256s)) {
      const body = this.#bodies.get(sha);
      if (body) out.set(sha, body);
      else missing.push(sha);
    }
    if (!missing.length) return out;
    const rows = await em.execute<{ sha256: string; body: string }[]>(
      `select sha256, convert_from(body, 'UTF8') as body from cdn_config_resource where sha256 = any(${shaList})`, [JSON.stringify(missing)],
    );
    for (const row of rows) {
      const body = new Uint8Array(this.#app.secretBox.open(row.body, bodyAad(row.sha256)));
      this.#bodies.set(row.sha256, body);
      out.set(row.sha256, body);
    }
    return out;
  }

  /**
   * Stores the bodies no version holds yet (sealed); how many were new. Call
   * inside the publish's transaction. `stored`: bodies known to be stored
   * already (the active version's), not looked up again.
   */
  async storeBodies(em: EntityManager, resources: readonly EncodedResource[], stored: Manifest | null = null): Promise<number> {
    const unique = new Map(resources.map((r) => [r.sha256, r.body]));
    for (const entry of stored?.values() ?? []) unique.delete(entry.sha256);
    if (!unique.size) return 0;
    const existing = await em.execute<{ sha256: string }[]>(
      `select sha256 from cdn_config_resource where sha256 = any(${shaList})`, [JSON.stringify([...unique.keys()])],
    );
    for (const row of existing) unique.delete(row.sha256);
    const fresh = [...unique];
    for (let i = 0; i < fresh.length; i += INSERT_BATCH) {
      const rows = fresh.slice(i, i + INSERT_BATCH).map(([sha256, body]) => ({ sha256, body: this.#app.secretBox.seal(body, bodyAad(sha256)) }));
      await em.execute(
        `insert into cdn_config_resource (sha256, body, created_at)
         select x.sha256, convert_to(x.body, 'UTF8'), now() from ${recordset({ sha256: 'text', body: 'text' })}
         on conflict (sha256) do nothing`,
        [JSON.stringify(rows)],
      );
    }
    for (const [sha256, body] of fresh) this.#bodies.set(sha256, body);
    return fresh.length;
  }

  /** Remembers a version just published (its manifest is already built). */
  remember(version: PublishedVersion): void {
    this.#versions.set(version.version, version);
  }
}
