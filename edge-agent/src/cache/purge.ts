// What a tier knows of purges: each entry carries its endpoint, path, tags and
// the generation at which the fetch that produced it began; a purge removes
// what it names at once and is recorded with a newer generation, so a fill
// that began before it cannot store the old object after it (a miss or a
// prefetch in flight when the purge came). Records outlive any fill.
import { compilePathGlob, type PathMatcher } from '../../../shared/src/match/glob.ts';

export interface EntryIndex {
  endpointId: string;
  /** Request path without query: the unit of path purges. */
  path: string;
  tags: readonly string[];
  /** The tier's generation when the fetch began (ObjectStore.generation()). */
  generation: number;
}

export type PurgeTarget =
  | { kind: 'path'; path: string }
  | { kind: 'tag'; tag: string }
  | { kind: 'glob'; pattern: string }
  | { kind: 'all' };

export interface PurgeRecord {
  /** The generation the purge was given (newer than every fill begun before it). */
  g: number;
  /** When it was recorded (ms since the epoch): records older than the grace are dropped. */
  at: number;
  target: PurgeTarget;
  /** A soft purge: what it names is marked stale (StoredEntry.staleSince), not removed. */
  soft?: true;
}

/** How long a purge is checked against fills: longer than any origin fetch may take. */
export const PURGE_RECORD_GRACE_MS = 10 * 60_000;

const globs = new Map<string, PathMatcher>();

function globMatcher(pattern: string): PathMatcher {
  let m = globs.get(pattern);
  if (m === undefined) {
    if (globs.size > 1000) globs.clear();
    globs.set(pattern, (m = compilePathGlob(pattern)));
  }
  return m;
}

/** Whether the purge target names an entry of this path and these tags (of the same endpoint). */
export function targets(target: PurgeTarget, path: string, tags: readonly string[]): boolean {
  switch (target.kind) {
    case 'all': return true;
    case 'path': return target.path === path;
    case 'tag': return tags.includes(target.tag);
    case 'glob': return globMatcher(target.pattern)(path);
  }
}

/** Whether a recorded (hard) purge newer than the fill's start covers the entry it would store. */
export function coveredByRecord(records: Iterable<PurgeRecord>, index: EntryIndex): boolean {
  for (const r of records) if (r.soft !== true && r.g > index.generation && targets(r.target, index.path, index.tags)) return true;
  return false;
}

/** When the latest soft purge newer than the fill's start that names the entry was made (ms), or 0: the entry is stale from then. */
export function softPurgedAt(records: Iterable<PurgeRecord>, index: EntryIndex): number {
  let at = 0;
  for (const r of records) if (r.soft === true && r.g > index.generation && targets(r.target, index.path, index.tags)) at = Math.max(at, r.at);
  return at;
}
