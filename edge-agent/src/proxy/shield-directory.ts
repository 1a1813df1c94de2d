// Origin shield at the agent (issue 23 item 5). The control plane sends the
// shield map (each region's online shield nodes and the hop keys); with it:
// - an edge agent fetches a miss of an endpoint whose shield_region is another
//   region from one node of that region, chosen by rendezvous hashing of the
//   cache key over its node ids (so every edge asks the same node for the same
//   object, and a node leaving moves only its own share), with a hop header
//   signed with the first key: `x-edge-shield: <node id> <unix seconds> <HMAC>`
//   over the node id, the time, the method, the Host and the target it sends;
// - a shield node takes a request carrying a hop header that verifies with one
//   of the keys within a minute of its time as another agent's: the viewer's
//   policies were applied by that agent (the shield skips them and the
//   response shaping, which the edge applies to what it serves), and answers
//   it through its cache, going to the origin only on its own miss. A header
//   that does not verify counts for nothing: the request is a viewer's.
// Every 30 s the agent that keeps the control stream probes every shield node
// of other regions: it connects and asks `OPTIONS *`, which any agent answers
// at once. The fastest connect time per region among the nodes that answered
// goes in its heartbeats (the shield-regions list's latency hint), and the
// regions none of whose nodes answered are reported unreachable.
// A node that refuses, or that does not answer a hop's request nor a liveness
// probe (forward.ts), is passed over for SHIELD_DOWN_MS: misses go to another
// node of its region, or to the origin.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { connect, isIP } from 'node:net';
import { connect as connectTls } from 'node:tls';
import type { OriginSnapshot } from '../../../shared/src/config/snapshot.ts';
import type { CompiledOrigin } from './routing.ts';

/** The request header that marks a shield hop. */
export const SHIELD_HEADER = 'x-edge-shield';
/** How far a hop's time may be from the shield's clock. */
const HOP_WINDOW_S = 60;
const PROBE_EVERY_MS = 30_000;
/** A probe's bound: connected and the first bytes of an HTTP answer within it, or the node is not answering. */
const PROBE_TIMEOUT_MS = 2_000;
/** How long a node that refused or went silent is passed over. */
const SHIELD_DOWN_MS = 30_000;
/** How long a hop waits for the shield's response head before asking whether the node answers at all. */
const SHIELD_FIRST_BYTE_MS = 1_000;

/** A hop given up: its shield node answered neither the hop nor a liveness probe. */
export class ShieldSilentError extends Error {
  override name = 'ShieldSilentError';
}
/** Connecting to a shield: a node that does not answer within this is unreachable (the edge goes to the origin). */
const SHIELD_CONNECT_TIMEOUT_MS = 2_000;

export interface ShieldNodeInfo {
  nodeId: string;
  address: string;
}

export interface ShieldMapUpdate {
  regions: { region: string; nodes: ShieldNodeInfo[] }[];
  hopKeys: Uint8Array[];
}

export interface ShieldNode extends ShieldNodeInfo {
  /** The node as an origin of the request path's client (its own pool, no retries: the edge goes to the origin instead). */
  origin: CompiledOrigin;
}

export interface ShieldLatency {
  region: string;
  latencyMs: number;
}

function shieldOrigin(node: ShieldNodeInfo): CompiledOrigin | null {
  const url = URL.parse(node.address);
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) return null;
  const scheme = url.protocol === 'https:' ? 'https' : 'http';
  const port = url.port === '' ? (scheme === 'https' ? 443 : 80) : Number(url.port);
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const snapshot: OriginSnapshot = {
    id: `shield:${node.nodeId}`, name: 'shield', scheme, host, port, path_prefix: '', enabled: true, health_check_url: null, health_check_interval_seconds: 30,
    // Shield nodes are the platform's own machines, usually on a private network.
    verify_tls: true, allow_private_network: true, ssrf_protection: true,
    timeout_ms: 60_000, connect_timeout_ms: SHIELD_CONNECT_TIMEOUT_MS, max_retries: 0, retry_on: [], forward_host_header: true, custom_headers: {},
  };
  const bracketed = host.includes(':') ? `[${host}]` : host;
  return {
    id: snapshot.id, snapshot, url: `${scheme}://${bracketed}:${port}`, hostHeader: `${bracketed}:${port}`, pathPrefix: '', retryOn: new Set(),
    poolKey: JSON.stringify(['shield', scheme, host, port]), customHeaders: [],
  };
}

/** Rendezvous (highest random weight) hashing: the node whose hash with the key is highest. */
function rendezvous(nodes: readonly ShieldNode[], key: string): ShieldNode {
  let best = nodes[0]!;
  let bestScore = -1;
  for (const n of nodes) {
    const score = createHmac('sha256', n.nodeId).update(key).digest().readUInt32BE(0);
    if (score > bestScore) {
      best = n;
      bestScore = score;
    }
  }
  return best;
}

const sign = (key: Uint8Array, nodeId: string, time: number, method: string, host: string, target: string) =>
  createHmac('sha256', key).update(`${nodeId}\n${time}\n${method}\n${host}\n${target}`).digest('base64url');

export class ShieldDirectory {
  /** This node's region and id (hops are signed with the id). */
  readonly region: string;
  readonly nodeId: string;
  private regions = new Map<string, ShieldNode[]>();
  private keys: Buffer[] = [];
  private latencies: ShieldLatency[] = [];
  private unreachable: string[] = [];
  /** Node id → until when it is passed over. */
  private readonly down = new Map<string, number>();
  /** Node id → its liveness probe under way (one at a time per node). */
  private readonly checks = new Map<string, Promise<boolean>>();
  private timer: NodeJS.Timeout | null = null;
  private readonly probe: boolean;

  constructor(options: { region: string; nodeId: string; probe: boolean }) {
    this.region = options.region;
    this.nodeId = options.nodeId;
    this.probe = options.probe;
  }

  /** A new map from the control plane. */
  apply(map: ShieldMapUpdate): void {
    const regions = new Map<string, ShieldNode[]>();
    for (const r of map.regions) {
      const nodes: ShieldNode[] = [];
      for (const n of r.nodes) {
        const origin = shieldOrigin(n);
        if (origin !== null) nodes.push({ nodeId: n.nodeId, address: n.address, origin });
      }
      if (nodes.length > 0) regions.set(r.region, nodes);
    }
    this.regions = regions;
    this.keys = map.hopKeys.map((k) => Buffer.from(k));
    if (this.probe) {
      void this.measure();
      if (this.timer === null) {
        this.timer = setInterval(() => void this.measure(), PROBE_EVERY_MS);
        this.timer.unref();
      }
    }
  }

  /** The map as received (a worker starts from its primary's). */
  get map(): ShieldMapUpdate {
    return {
      regions: [...this.regions].map(([region, nodes]) => ({ region, nodes: nodes.map((n) => ({ nodeId: n.nodeId, address: n.address })) })),
      hopKeys: this.keys,
    };
  }

  /**
   * Whether the map names this node a shield of its region: only then does it take hops (a hop skips the viewer
   * checks, which ran at the edge). Any region's endpoints, whatever its configuration says their shield is, so two
   * versions that disagree never bounce a hop; but a captured hop header is worth nothing at a plain edge node.
   */
  get shieldsItsRegion(): boolean {
    return this.regions.get(this.region)?.some((n) => n.nodeId === this.nodeId) ?? false;
  }

  /** Every shield node's origin (their pools are kept while they are in the map). */
  get origins(): CompiledOrigin[] {
    return [...this.regions.values()].flatMap((nodes) => nodes.map((n) => n.origin));
  }

  /**
   * The shield node a miss of `key` goes to for an endpoint shielded in `region`: none when the region is this
   * agent's own (it is a shield of it, or a peer of one: it goes to the origin), has no online shield node, or no
   * key to sign with has arrived yet.
   */
  target(region: string | null, key: string): ShieldNode | null {
    if (region === null || region === this.region || this.keys.length === 0) return null;
    const nodes = this.regions.get(region);
    if (nodes === undefined) return null;
    const up = this.down.size === 0 ? nodes : nodes.filter((n) => !this.isDown(n.nodeId));
    return up.length === 0 ? null : rendezvous(up, key);
  }

  /** The node refused, or answered neither a hop nor a liveness probe: passed over for a while. */
  markDown(nodeId: string, now = Date.now()): void {
    this.down.set(nodeId, now + SHIELD_DOWN_MS);
  }

  private isDown(nodeId: string): boolean {
    const until = this.down.get(nodeId);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.down.delete(nodeId);
    return false;
  }

  /**
   * Watches a hop's wait for the node's response head: past SHIELD_FIRST_BYTE_MS the node's liveness is probed, and a
   * node that does not answer the probe either aborts the hop (the signal's reason: ShieldSilentError); a live node
   * busy with a slow origin is waited for. answered(): the head came (or the hop failed), stop watching.
   */
  watch(node: ShieldNode, viewer: AbortSignal | undefined): { signal: AbortSignal; answered(): void } {
    const silent = new AbortController();
    let waiting = true;
    const timer = setTimeout(() => {
      void this.alive(node).then((ok) => {
        if (!ok && waiting) silent.abort(new ShieldSilentError(`shield node ${node.nodeId} answered nothing within ${SHIELD_FIRST_BYTE_MS} ms, nor a liveness probe`));
      });
    }, SHIELD_FIRST_BYTE_MS);
    timer.unref();
    return {
      signal: viewer === undefined ? silent.signal : AbortSignal.any([viewer, silent.signal]),
      answered: () => {
        waiting = false;
        clearTimeout(timer);
      },
    };
  }

  /** Whether the node answers HTTP now (`OPTIONS *`, answered by the agent itself, never by an origin). */
  alive(node: ShieldNode): Promise<boolean> {
    let check = this.checks.get(node.nodeId);
    if (check === undefined) {
      check = probe(node.origin).then((p) => p.answered).finally(() => this.checks.delete(node.nodeId));
      this.checks.set(node.nodeId, check);
    }
    return check;
  }

  /** The hop header of a request this agent sends to a shield. */
  hopHeader(method: string, host: string, target: string, now = Date.now()): string {
    const time = Math.floor(now / 1000);
    return `${this.nodeId} ${time} ${sign(this.keys[0]!, this.nodeId, time, method, host, target)}`;
  }

  /** The agent a valid hop header names (its node id), or null: absent, malformed, stale, or not signed with a current key. */
  verifyHop(header: string | undefined, method: string, host: string, target: string, now = Date.now()): string | null {
    if (header === undefined || this.keys.length === 0) return null;
    const parts = header.split(' ');
    if (parts.length !== 3) return null;
    const [nodeId, timeText, mac] = parts as [string, string, string];
    const time = Number(timeText);
    if (!/^\d{1,12}$/.test(timeText) || Math.abs(now / 1000 - time) > HOP_WINDOW_S || !/^[A-Za-z0-9_-]{43}$/.test(mac)) return null;
    const given = Buffer.from(mac, 'base64url');
    for (const key of this.keys) {
      if (timingSafeEqual(given, Buffer.from(sign(key, nodeId, time, method, host, target), 'base64url'))) return nodeId;
    }
    return null;
  }

  /** The fastest connect time to each other region's shield nodes that answered, last measured (heartbeats). */
  get measured(): readonly ShieldLatency[] {
    return this.latencies;
  }

  /** The other regions none of whose shield nodes answered the last probe (heartbeats). */
  get unreachableRegions(): readonly string[] {
    return this.unreachable;
  }

  private async measure(): Promise<void> {
    const out: ShieldLatency[] = [];
    const silent: string[] = [];
    await Promise.all([...this.regions].filter(([region]) => region !== this.region).map(async ([region, nodes]) => {
      const probes = await Promise.all(nodes.map((n) => probe(n.origin)));
      const ok = probes.filter((p) => p.answered).map((p) => p.connectMs);
      if (ok.length > 0) out.push({ region, latencyMs: Math.round(Math.min(...ok)) });
      else silent.push(region);
    }));
    this.latencies = out.sort((a, b) => (a.region < b.region ? -1 : 1));
    this.unreachable = silent.sort();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}

/**
 * Connects to a shield node and asks `OPTIONS *` (over TLS for an https:// address, its certificate unchecked: nothing
 * is sent but the question): the time to connect, and whether an HTTP answer began within PROBE_TIMEOUT_MS.
 */
function probe(origin: CompiledOrigin): Promise<{ connectMs: number; answered: boolean }> {
  const { host, port, scheme } = origin.snapshot;
  return new Promise((resolve) => {
    const t0 = performance.now();
    let connectMs = 0;
    const socket = scheme === 'https'
      ? connectTls({ host, port: port!, servername: isIP(host) ? undefined : host, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] })
      : connect({ host, port: port! });
    const timer = setTimeout(() => done(false), PROBE_TIMEOUT_MS);
    function done(answered: boolean): void {
      clearTimeout(timer);
      socket.destroy();
      resolve({ connectMs, answered });
    }
    socket.once('connect', () => { connectMs = performance.now() - t0; });
    socket.once(scheme === 'https' ? 'secureConnect' : 'connect', () => socket.write(`OPTIONS * HTTP/1.1\r\nHost: ${origin.hostHeader}\r\nConnection: close\r\n\r\n`));
    socket.once('data', (chunk: Buffer) => done(chunk.subarray(0, 5).toString('latin1') === 'HTTP/'));
    socket.once('error', () => done(false));
    socket.once('end', () => done(false));
  });
}
