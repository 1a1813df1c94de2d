// The configuration the agent holds, as the control plane sends it: a set of
// resources keyed "<type>/<id>" (shared/src/config/resources.ts), each with the
// version it last changed in, its sha256 and its parsed snapshot entry, plus the
// whole set's digest kept up to date incrementally.
//
// A push (full or delta) is first staged: checked (base version, sha256 of each
// body, resource count, digest), only its new or changed bodies parsed through
// the entry schemas, and the snapshot built from the entries already parsed, so
// a one-endpoint delta on 10,000 endpoints parses one endpoint. Unchanged
// resources keep their entry objects: compileRoutingTable reuses what it
// compiled for them. Nothing changes until the staged set is committed, after
// the agent has made it live.
import {
  endpointSnapshot, logDrainSnapshot, responseHeadersPolicySnapshot,
  type ConfigSnapshot, type EndpointSnapshot, type LogDrainSnapshot, type ResponseHeadersPolicySnapshot,
} from '../../../shared/src/config/snapshot.ts';
import { ConfigDigest, parseResourceKey, sha256Hex, splitSnapshot, type ResourceType } from '../../../shared/src/config/resources.ts';

/** A resource as a push carries it (the proto's ConfigResource with numbers). */
export interface PushedResource {
  key: string;
  version: number;
  body: Uint8Array;
  sha256: string;
}

/** A ConfigUpdate with numbers. */
export interface ConfigPush {
  version: number;
  full: boolean;
  baseVersion: number;
  resources: readonly PushedResource[];
  removed: readonly string[];
  digest: string;
  resourceCount: number;
}

type Entry = EndpointSnapshot | ResponseHeadersPolicySnapshot | LogDrainSnapshot;

export interface HeldResource {
  readonly key: string;
  /** null: a type this agent does not know (kept for the digest, not served). */
  readonly type: ResourceType | null;
  readonly version: number;
  readonly sha256: string;
  readonly entry: Entry | null;
  /** The body while it is not yet on disk (the store drops it once written). */
  body: Uint8Array | null;
}

/** Where the held configuration came from: a control plane can send deltas on it only when it sent it. */
export type ConfigSource = 'none' | 'control-plane' | 'file';

export interface StagedConfig {
  readonly version: number;
  readonly source: ConfigSource;
  readonly resources: Map<string, HeldResource>;
  readonly digest: ConfigDigest;
  readonly snapshot: ConfigSnapshot;
  /** Keys added, changed or removed. */
  readonly changed: number;
  /** A resource other than an endpoint changed: compiled endpoints are not reused (they may depend on it). */
  readonly nonEndpointChanged: boolean;
}

/** Why a push is refused; `message` is the Ack's error. Base problems start with "base_mismatch:". */
export class ConfigPushError extends Error {
  override name = 'ConfigPushError';
}

export const BASE_MISMATCH = 'base_mismatch:';

const SCHEMAS = {
  endpoint: endpointSnapshot,
  response_headers_policy: responseHeadersPolicySnapshot,
  log_drain: logDrainSnapshot,
} as const;

const decoder = new TextDecoder('utf-8', { fatal: true });

function parseEntry(key: string, type: ResourceType, id: string, body: Uint8Array): Entry {
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(body));
  } catch {
    throw new ConfigPushError(`configuration refused: ${key}: body is not JSON`);
  }
  const parsed = SCHEMAS[type].safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue.path.length ? `${issue.path.join('.')}: ` : '';
    throw new ConfigPushError(`configuration refused: ${key}: ${path}${issue.message}`);
  }
  if (parsed.data.id !== id) throw new ConfigPushError(`configuration refused: ${key}: body id ${JSON.stringify(parsed.data.id)} does not match its key`);
  return parsed.data;
}

function buildSnapshot(version: number, resources: Map<string, HeldResource>): ConfigSnapshot {
  const snapshot: ConfigSnapshot = { version, generated_at: new Date().toISOString(), endpoints: [], response_headers_policies: [], log_drains: [] };
  for (const r of resources.values()) {
    if (r.entry === null) continue;
    if (r.type === 'endpoint') snapshot.endpoints.push(r.entry as EndpointSnapshot);
    else if (r.type === 'response_headers_policy') snapshot.response_headers_policies.push(r.entry as ResponseHeadersPolicySnapshot);
    else if (r.type === 'log_drain') snapshot.log_drains.push(r.entry as LogDrainSnapshot);
  }
  return snapshot;
}

export class ResourceSet {
  version = 0;
  source: ConfigSource = 'none';
  resources = new Map<string, HeldResource>();
  digest = new ConfigDigest();

  /** The version a control plane may diff from (0 when the configuration did not come from one). */
  get controlVersion(): number {
    return this.source === 'control-plane' ? this.version : 0;
  }

  /** Checks and parses a push against the held set; throws ConfigPushError, changes nothing. */
  stage(push: ConfigPush): StagedConfig {
    const delta = !push.full;
    if (delta && (this.source !== 'control-plane' || push.baseVersion !== this.version)) {
      throw new ConfigPushError(`${BASE_MISMATCH} delta on version ${push.baseVersion}, this agent holds ${this.controlVersion}`);
    }
    const previous = this.resources;
    const next = delta ? new Map(previous) : new Map<string, HeldResource>();
    const digest = delta ? this.digest.clone() : new ConfigDigest();
    let changed = 0;
    let nonEndpointChanged = false;
    if (delta) {
      for (const key of push.removed) {
        const held = next.get(key);
        if (held === undefined) throw new ConfigPushError(`${BASE_MISMATCH} removes ${key}, which this agent does not hold`);
        next.delete(key);
        digest.toggle(key, held.sha256);
        changed++;
        if (held.type !== 'endpoint') nonEndpointChanged = true;
      }
    }
    const seen = new Set<string>();
    for (const r of push.resources) {
      if (seen.has(r.key)) throw new ConfigPushError(`configuration refused: ${r.key} appears twice in the push`);
      seen.add(r.key);
      const parsedKey = parseResourceKey(r.key);
      if (parsedKey === null && !/^[a-z_]+\/./.test(r.key)) throw new ConfigPushError(`configuration refused: ${JSON.stringify(r.key)} is not a resource key`);
      const sha = sha256Hex(r.body);
      if (sha !== r.sha256) throw new ConfigPushError(`configuration refused: ${r.key}: body does not match its sha256`);
      const before = delta ? next.get(r.key) : previous.get(r.key);
      if (delta && before !== undefined) digest.toggle(r.key, before.sha256);
      digest.toggle(r.key, sha);
      let held: HeldResource;
      if (before !== undefined && before.sha256 === sha) {
        // Unchanged (a full push after a reconnect resends everything): keep the parsed entry, and with it the compiled endpoint.
        held = before.version === r.version ? before : { ...before, version: r.version };
      } else {
        changed++;
        const type = parsedKey?.type ?? null;
        if (type !== 'endpoint') nonEndpointChanged = true;
        held = { key: r.key, type, version: r.version, sha256: sha, entry: type === null ? null : parseEntry(r.key, type, parsedKey!.id, r.body), body: r.body };
      }
      next.set(r.key, held);
    }
    if (!delta) {
      for (const [key, held] of previous) {
        if (next.has(key)) continue;
        changed++;
        if (held.type !== 'endpoint') nonEndpointChanged = true;
      }
    }
    const mismatch = delta ? BASE_MISMATCH : 'digest_mismatch:';
    if (next.size !== push.resourceCount) {
      throw new ConfigPushError(`${mismatch} ${next.size} resources after applying version ${push.version}, the control plane counts ${push.resourceCount}`);
    }
    if (push.digest !== '' && digest.hex() !== push.digest) {
      throw new ConfigPushError(`${mismatch} digest after applying version ${push.version} is ${digest.hex()}, the control plane's is ${push.digest}`);
    }
    return { version: push.version, source: 'control-plane', resources: next, digest, snapshot: buildSnapshot(push.version, next), changed, nonEndpointChanged };
  }

  /** A whole snapshot already parsed (--config-file, a restored legacy file): its entries become the resources. */
  stageSnapshot(snapshot: ConfigSnapshot, source: ConfigSource): StagedConfig {
    const next = new Map<string, HeldResource>();
    const digest = new ConfigDigest();
    const entries = [...snapshot.endpoints, ...snapshot.response_headers_policies, ...snapshot.log_drains];
    const encoded = splitSnapshot(snapshot);
    for (let i = 0; i < encoded.length; i++) {
      const r = encoded[i];
      const type = parseResourceKey(r.key)!.type;
      next.set(r.key, { key: r.key, type, version: snapshot.version, sha256: r.sha256, entry: entries[i], body: r.body });
      digest.toggle(r.key, r.sha256);
    }
    return { version: snapshot.version, source, resources: next, digest, snapshot, changed: next.size, nonEndpointChanged: true };
  }

  commit(staged: StagedConfig): void {
    this.version = staged.version;
    this.source = staged.source;
    this.resources = staged.resources;
    this.digest = staged.digest;
  }
}
