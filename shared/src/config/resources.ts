// A configuration as a set of resources, the unit of incremental updates (as
// delta xDS does): every endpoint (with its origins, routes, cache rules,
// signing keys, IP rules and custom domains), every response headers policy
// and every log drain is one resource keyed "<type>/<id>", with the JSON of its
// snapshot entry as body and the SHA-256 of that body. The control plane
// stores a version as a manifest of key → (version last changed, sha256) and
// sends an agent only the resources whose sha256 differs from what the agent
// acknowledged; both sides check the result with configDigest.
import { createHash } from 'node:crypto';
import type { ConfigSnapshot } from './snapshot.ts';

export const RESOURCE_TYPES = ['endpoint', 'response_headers_policy', 'log_drain'] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

/** The snapshot member holding each resource type. */
const MEMBER: Record<ResourceType, 'endpoints' | 'response_headers_policies' | 'log_drains'> = {
  endpoint: 'endpoints',
  response_headers_policy: 'response_headers_policies',
  log_drain: 'log_drains',
};

export function resourceKey(type: ResourceType, id: string): string {
  return `${type}/${id}`;
}

/** "<type>/<id>" → its parts; null when the key is not one of ours. */
export function parseResourceKey(key: string): { type: ResourceType; id: string } | null {
  const slash = key.indexOf('/');
  if (slash <= 0) return null;
  const type = key.slice(0, slash) as ResourceType;
  const id = key.slice(slash + 1);
  return (RESOURCE_TYPES as readonly string[]).includes(type) && id ? { type, id } : null;
}

export interface EncodedResource {
  key: string;
  /** UTF-8 JSON of the snapshot entry. */
  body: Uint8Array;
  /** Hex SHA-256 of body. */
  sha256: string;
}

export function sha256Hex(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Encodes one snapshot entry as a resource (the JSON text is the identity: build entries with a fixed member order). */
export function encodeResource(type: ResourceType, entry: { id: string }): EncodedResource {
  const body = Buffer.from(JSON.stringify(entry), 'utf8');
  return { key: resourceKey(type, entry.id), body, sha256: sha256Hex(body) };
}

/** Every resource of a snapshot, in snapshot order. */
export function splitSnapshot(snapshot: Pick<ConfigSnapshot, 'endpoints' | 'response_headers_policies' | 'log_drains'>): EncodedResource[] {
  const out: EncodedResource[] = [];
  for (const type of RESOURCE_TYPES) for (const entry of snapshot[MEMBER[type]] ?? []) out.push(encodeResource(type, entry));
  return out;
}

/**
 * The snapshot (unparsed: run parseConfigSnapshot on it) made of decoded
 * resource bodies; keys of unknown types are ignored. Entries keep the
 * iteration order of `resources` within each type.
 */
export function assembleSnapshot(version: number, resources: Iterable<[key: string, body: unknown]>, generatedAt = new Date().toISOString()): Record<string, unknown> {
  const snapshot = { version, generated_at: generatedAt, endpoints: [] as unknown[], response_headers_policies: [] as unknown[], log_drains: [] as unknown[] };
  for (const [key, body] of resources) {
    const parsed = parseResourceKey(key);
    if (parsed) snapshot[MEMBER[parsed.type]].push(body);
  }
  return snapshot;
}

const DIGEST_BYTES = 32;

/**
 * An order-independent digest of a whole configuration: the XOR of
 * SHA-256("<key> <sha256>") over every resource. Adding and removing a
 * resource are the same XOR, so both sides keep it up to date in O(changed)
 * instead of rehashing thousands of resources per delta.
 */
export class ConfigDigest {
  private readonly acc = Buffer.alloc(DIGEST_BYTES);

  static of(entries: Iterable<[key: string, sha256: string]>): ConfigDigest {
    const d = new ConfigDigest();
    for (const [key, sha] of entries) d.toggle(key, sha);
    return d;
  }

  /** Adds the resource if absent from the digest, removes it if present (XOR). */
  toggle(key: string, sha256: string): void {
    const h = createHash('sha256').update(`${key} ${sha256}`).digest();
    for (let i = 0; i < DIGEST_BYTES; i++) this.acc[i]! ^= h[i]!;
  }

  /** Replaces one resource's sha256 (either side may be null: added or removed). */
  replace(key: string, before: string | null, after: string | null): void {
    if (before !== null) this.toggle(key, before);
    if (after !== null) this.toggle(key, after);
  }

  clone(): ConfigDigest {
    const d = new ConfigDigest();
    this.acc.copy(d.acc);
    return d;
  }

  hex(): string {
    return this.acc.toString('hex');
  }
}

/** The digest of a manifest or resource list in one call. */
export function configDigest(entries: Iterable<[key: string, sha256: string]>): string {
  return ConfigDigest.of(entries).hex();
}
