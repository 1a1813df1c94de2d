// The seam between configuration versions (this capability) and the control
// channel (edge-channel). This side gives the channel a ConfigSource to diff
// and push from, and announces each version it makes active; the channel
// gives this side a FleetView (services.edgeFleet, once it has started) to
// count how far a version has propagated. The channel imports these types
// from this capability's index.ts; this capability imports nothing of the
// channel.

/** One resource of a published version: the version it last changed in and the SHA-256 of its body. */
export interface ManifestEntry {
  version: number;
  sha256: string;
}

/** Resource key ("endpoint/<id>", see shared/src/config/resources.ts) → entry. */
export type Manifest = ReadonlyMap<string, ManifestEntry>;

export interface PublishedVersion {
  /** The configuration version's uuid. */
  id: string;
  version: number;
  manifest: Manifest;
  /** configDigest of the manifest (hex). */
  digest: string;
}

export interface ConfigSource {
  /** The active published version; null before the first publish. */
  active(): Promise<PublishedVersion | null>;
  /** A published version by number (active, superseded or rolled back); null when unknown. Versions are immutable, so this may be cached. */
  version(versionNumber: number): Promise<PublishedVersion | null>;
  /** Resource bodies (UTF-8 JSON) by SHA-256; a missing one is absent from the map. */
  bodies(sha256s: readonly string[]): Promise<Map<string, Uint8Array>>;
}

/**
 * Published on the KeyValueStore (Redis pub/sub across replicas) after a
 * version becomes active, with the JSON message {"version": <number>}: every
 * replica pushes it to the agents it holds.
 */
export const CONFIG_PUBLISHED_CHANNEL = 'edge:config-published';

export interface PropagationCounts {
  total_nodes: number;
  synced_nodes: number;
  pending_nodes: number;
  failed_nodes: number;
}

export interface FleetView {
  /**
   * How far a version has reached, counted over the nodes online (or
   * draining) now: synced = applied this version or a later one; failed =
   * refused (nacked) this version or a later one and applied none of them;
   * pending = the rest.
   */
  propagation(versionNumber: number): Promise<PropagationCounts>;
}
