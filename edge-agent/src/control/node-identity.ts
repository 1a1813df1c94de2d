// The agent's stable identity on the control channel: a UUID generated on first
// start and kept in DATA_DIR/node-id, so a restart (or a reconnect) is the same
// edge node to the control plane.
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomicSync } from './config-store.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface NodeIdentity {
  nodeId: string;
  /** The id was made now (first start, or the file was unreadable). */
  created: boolean;
}

export function loadOrCreateNodeId(dataDir: string): NodeIdentity {
  const file = join(dataDir, 'node-id');
  try {
    const text = readFileSync(file, 'utf8').trim().toLowerCase();
    if (UUID.test(text)) return { nodeId: text, created: false };
  } catch {
    // absent: first start
  }
  const nodeId = randomUUID();
  mkdirSync(dataDir, { recursive: true });
  writeFileAtomicSync(file, `${nodeId}\n`);
  return { nodeId, created: true };
}

let cachedVersion: string | null = null;

/** The agent's version: the project's package.json version. */
export function agentVersion(): string {
  if (cachedVersion === null) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
      cachedVersion = typeof pkg.version === 'string' ? pkg.version : 'unknown';
    } catch {
      cachedVersion = 'unknown';
    }
  }
  return cachedVersion;
}
