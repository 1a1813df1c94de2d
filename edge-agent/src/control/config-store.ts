// The applied snapshot and purge sequence on disk, so that a restart (or a
// control plane that cannot be reached) serves the last configuration. Writes go
// to a temporary file and are renamed into place: a crash never leaves half a file.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface PersistedState {
  version: number;
  snapshot: unknown;
  purgeSequence: number;
}

export class ConfigStore {
  private readonly dir: string;

  constructor(dataDir: string) {
    this.dir = dataDir;
    mkdirSync(dataDir, { recursive: true });
  }

  private atomicWrite(name: string, content: string): void {
    const file = join(this.dir, name);
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, content, { mode: 0o600 });
    renameSync(tmp, file);
  }

  saveSnapshot(version: number, snapshot: unknown): void {
    this.atomicWrite('config-snapshot.json', JSON.stringify({ version, snapshot }));
  }

  savePurgeSequence(sequence: number): void {
    this.atomicWrite('purge-sequence.json', JSON.stringify({ sequence }));
  }

  load(): PersistedState | null {
    let snap: { version: number; snapshot: unknown } | null = null;
    try {
      snap = JSON.parse(readFileSync(join(this.dir, 'config-snapshot.json'), 'utf8'));
    } catch {
      snap = null;
    }
    let purgeSequence = 0;
    try {
      purgeSequence = Number(JSON.parse(readFileSync(join(this.dir, 'purge-sequence.json'), 'utf8')).sequence) || 0;
    } catch {
      purgeSequence = 0;
    }
    if (!snap) return purgeSequence ? { version: 0, snapshot: null, purgeSequence } : null;
    return { version: snap.version, snapshot: snap.snapshot, purgeSequence };
  }
}
