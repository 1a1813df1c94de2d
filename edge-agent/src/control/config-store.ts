// The applied configuration and purge sequence on disk, so that a restart (or a
// control plane that cannot be reached) serves the last configuration.
//
// Layout under DATA_DIR:
//   config/resources/<sha256>.json  one file per resource body, named by its hash
//   config/manifest.json            {version, source, digest, resources: [[key, version, sha256], ...]}
//   purge-sequence.json             {sequence}
// A delta writes only its new bodies and the manifest (about 130 bytes per
// resource), never the 10,000 bodies it did not change. Every file is written
// to a temporary name and renamed into place, bodies before the manifest that
// names them, and bodies no manifest names any more are deleted only after the
// manifest is in place: a crash at any point leaves the previous manifest or the
// new one, each with all its bodies. Loading checks every body against its
// sha256 and the manifest's digest, and refuses the whole on any mismatch.
//
// Configuration writes are asynchronous (the control client acknowledges as
// soon as a configuration is live) and coalesced: while one write runs, later
// states replace each other and only the newest is written next.
//
// With a state key (sealing.ts; the agent process always has one) the manifest
// and every body are sealed, and a body's file is named by an HMAC of its
// sha256 instead of the sha256 itself. A clear layout found at load (an agent
// from before sealing) is read once and rewritten sealed (needsReseal).
import { mkdirSync, readdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigDigest, sha256Hex } from '../../../shared/src/config/resources.ts';
import type { ConfigSource, HeldResource } from './resource-set.ts';
import { isSealed, type StateKey } from './sealing.ts';

export interface PersistedResource {
  key: string;
  version: number;
  sha256: string;
  body: Buffer;
}

export interface PersistedConfig {
  version: number;
  source: ConfigSource;
  digest: string;
  resources: PersistedResource[];
  /** Found in clear while the store seals: write it again (the bodies must be kept in memory until then). */
  needsReseal: boolean;
}

/** The legacy single-file snapshot (agents before the resource layout). */
export interface LegacySnapshot {
  version: number;
  snapshot: unknown;
}

export interface PersistedState {
  config: PersistedConfig | null;
  legacy: LegacySnapshot | null;
  purgeSequence: number;
}

/** What a configuration write needs: taken when the write starts, so the newest state is the one written. */
export interface ConfigState {
  version: number;
  source: ConfigSource;
  digest: string;
  resources: Iterable<HeldResource>;
}

interface Manifest {
  version: number;
  source: ConfigSource;
  digest: string;
  resources: [key: string, version: number, sha256: string][];
}

const SHA = /^[0-9a-f]{64}$/;

/** Writes through a temporary file renamed into place: readers see the old content or the new, never part of it. */
export function writeFileAtomicSync(file: string, content: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, content, { mode: 0o600 });
  renameSync(tmp, file);
}

export class ConfigStore {
  private readonly dir: string;
  private readonly configDir: string;
  private readonly resourceDir: string;
  /** Body files known to be on disk, by file name without .json (named by the last manifest written or loaded). */
  private onDisk = new Set<string>();
  private readonly key: StateKey | null;
  private readonly keepBodies: boolean;
  private pending: (() => ConfigState) | null = null;
  private writing: Promise<void> | null = null;
  private readonly onError: (err: Error) => void;

  /** key: seals what is written (null: clear files, for tests of the layout only: the agent process always passes one). */
  constructor(dataDir: string, onError: (err: Error) => void = () => {}, key: StateKey | null = null, keepBodies = false) {
    this.key = key;
    this.keepBodies = keepBodies;
    this.dir = dataDir;
    this.configDir = join(dataDir, 'config');
    this.resourceDir = join(this.configDir, 'resources');
    this.onError = onError;
    mkdirSync(this.resourceDir, { recursive: true });
  }

  private async atomicWrite(file: string, content: string | Uint8Array): Promise<void> {
    const tmp = `${file}.${process.pid}.tmp`;
    await writeFile(tmp, content, { mode: 0o600 });
    await rename(tmp, file);
  }

  savePurgeSequence(sequence: number): void {
    writeFileAtomicSync(join(this.dir, 'purge-sequence.json'), JSON.stringify({ sequence }));
  }

  /**
   * Schedules a write of the configuration `state()` returns when the write
   * starts (the newest one by then). Resolves when a write covering it is done.
   */
  saveConfig(state: () => ConfigState): Promise<void> {
    this.pending = state;
    if (this.writing === null) this.writing = this.drain();
    return this.writing;
  }

  /** Resolves once every scheduled configuration write is on disk. */
  async flush(): Promise<void> {
    while (this.writing !== null) await this.writing;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending !== null) {
        const state = this.pending();
        this.pending = null;
        try {
          await this.write(state);
        } catch (err) {
          this.onError(err as Error);
        }
      }
    } finally {
      this.writing = null;
    }
  }

  /** A body's file name (without .json): its sha256, or an HMAC of it when sealed. */
  private fileName(sha256: string): string {
    return this.key === null ? sha256 : this.key.name(sha256);
  }

  private async write(state: ConfigState): Promise<void> {
    const manifest: Manifest = { version: state.version, source: state.source, digest: state.digest, resources: [] };
    const written: HeldResource[] = [];
    const keep = new Set<string>();
    for (const r of state.resources) {
      manifest.resources.push([r.key, r.version, r.sha256]);
      const name = this.fileName(r.sha256);
      if (keep.has(name)) continue;
      keep.add(name);
      if (this.onDisk.has(name)) continue;
      if (r.body === null) throw new Error(`configuration not persisted: the body of ${r.key} is neither on disk nor in memory`);
      await this.atomicWrite(join(this.resourceDir, `${name}.json`), this.key === null ? r.body : this.key.seal(r.body, `resource ${r.sha256}`));
      written.push(r);
    }
    const text = JSON.stringify(manifest);
    await this.atomicWrite(join(this.configDir, 'manifest.json'), this.key === null ? text : this.key.seal(Buffer.from(text), 'manifest'));
    // The single-file snapshot of agents before the resource layout, in clear: gone once its configuration is written.
    await unlink(join(this.dir, 'config-snapshot.json')).catch(() => {});
    const before = this.onDisk;
    this.onDisk = keep;
    if (!this.keepBodies) for (const r of written) r.body = null;
    for (const name of before) if (!keep.has(name)) await unlink(join(this.resourceDir, `${name}.json`)).catch(() => {});
  }

  load(): PersistedState | null {
    let purgeSequence = 0;
    try {
      purgeSequence = Number(JSON.parse(readFileSync(join(this.dir, 'purge-sequence.json'), 'utf8')).sequence) || 0;
    } catch {
      purgeSequence = 0;
    }
    const config = this.loadConfig();
    let legacy: LegacySnapshot | null = null;
    if (config === null) {
      try {
        legacy = JSON.parse(readFileSync(join(this.dir, 'config-snapshot.json'), 'utf8')) as LegacySnapshot;
      } catch {
        legacy = null;
      }
    }
    if (config === null && legacy === null && purgeSequence === 0) return null;
    return { config, legacy, purgeSequence };
  }

  /** The persisted configuration; null when there is none. Throws when it is there but damaged. */
  private loadConfig(): PersistedConfig | null {
    let raw: Buffer;
    try {
      raw = readFileSync(join(this.configDir, 'manifest.json'));
    } catch {
      return null;
    }
    const sealed = isSealed(raw);
    if (sealed && this.key === null) throw new Error('config/manifest.json is sealed and this agent has no key to open it');
    // Throws SealError when sealed with another key (a changed agent token).
    const manifest = JSON.parse((sealed ? this.key!.open(raw, 'manifest') : raw).toString('utf8')) as Manifest;
    if (!Number.isSafeInteger(manifest.version) || !Array.isArray(manifest.resources)) throw new Error('config/manifest.json is malformed');
    const digest = new ConfigDigest();
    const resources: PersistedResource[] = [];
    const present = new Set<string>();
    for (const [key, version, sha256] of manifest.resources) {
      if (typeof key !== 'string' || !SHA.test(sha256)) throw new Error('config/manifest.json is malformed');
      const name = sealed ? this.key!.name(sha256) : sha256;
      const file = readFileSync(join(this.resourceDir, `${name}.json`));
      const body = sealed ? this.key!.open(file, `resource ${sha256}`) : file;
      if (sha256Hex(body) !== sha256) throw new Error(`config/resources/${name}.json does not match its sha256`);
      digest.toggle(key, sha256);
      present.add(name);
      resources.push({ key, version, sha256, body });
    }
    if (digest.hex() !== manifest.digest) throw new Error('config/manifest.json: the resources do not match its digest');
    this.onDisk = present;
    this.collectStrays(present);
    return { version: manifest.version, source: manifest.source, digest: manifest.digest, resources, needsReseal: !sealed && this.key !== null };
  }

  /** Bodies left by a write that crashed before its manifest (or before its clean-up). */
  private collectStrays(keep: Set<string>): void {
    for (const name of readdirSync(this.resourceDir)) {
      const sha = name.endsWith('.json') ? name.slice(0, -5) : null;
      if (sha !== null && keep.has(sha)) continue;
      try {
        unlinkSync(join(this.resourceDir, name));
      } catch {
        // best effort
      }
    }
  }
}
