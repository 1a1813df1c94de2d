// Origin shield (issue 23 item 5; a feed of the session layer, channel-feed.ts).
// A node says in Hello whether it shields (the address other agents reach it
// at) and how its region is shown (name, country, city); each heartbeat
// carries what it measured to the shield nodes of other regions (a latency per
// region it reached, the regions it could not). Every stream
// is sent the shield map (each region's online shield nodes) after Welcome and
// whenever it changes (read on every tick, so every replica's streams follow
// the nodes of every replica within a tick), with the keys that sign shield
// hops: derived from the platform's secrets key per UTC day, today's first and
// yesterday's after it, so a hop signed just before midnight still passes.
import { create } from '@bufbuild/protobuf';
import { createHmac } from 'node:crypto';
import { ConnectResponseSchema, type Heartbeat, type Hello } from '../../../shared/gen/edge/v1/control_pb.ts';
import { shieldAddressProblem } from '../../../shared/src/edge/shield-address.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import type { ChannelContext, Feed } from './channel-feed.ts';
import type { AgentStream } from './channel-stream.ts';

/** The deriveKey purpose of the shield hop keys. */
export const SHIELD_HOP_PURPOSE = 'edge-shield-hops';
const REGION = /^[a-z0-9][a-z0-9-]{0,63}$/;
const MAX_LATENCIES = 100;
const MAX_LATENCY_MS = 60_000;

const printable = (text: string, max: number) => text.length <= max && /^[^\x00-\x1f\x7f]*$/.test(text);

/** The hop keys of the UTC day `now` falls in and of the day before. */
export function shieldHopKeys(base: Buffer, now: Date): Buffer[] {
  const day = (d: Date) => d.toISOString().slice(0, 10);
  return [day(now), day(new Date(now.getTime() - 86_400_000))].map((d) => createHmac('sha256', base).update(`shield hop key ${d}`).digest());
}

interface ShieldRow {
  id: string;
  region: string;
  shield_address: string;
}

export class ShieldFeed implements Feed<null> {
  readonly name = 'shield map';
  readonly node = {
    columns: { shield_latencies: { type: 'jsonb', merge: 'latest' } },
    fromHello: (hello: Hello) => ({
      shield_address: hello.shieldAddress === '' ? null : hello.shieldAddress,
      region_name: hello.regionName === '' ? null : hello.regionName,
      region_country_code: hello.regionCountryCode === '' ? null : hello.regionCountryCode,
      region_city: hello.regionCity === '' ? null : hello.regionCity,
    }),
  } as const;
  readonly #context: ChannelContext;
  readonly #base: Buffer;
  readonly #streams = new Set<AgentStream>();
  /** The map last sent (its encoded bytes), and what it was made of. */
  #sent: { key: string; bytes: Uint8Array } | null = null;

  constructor(context: ChannelContext, base: Buffer) {
    this.#context = context;
    this.#base = base;
  }

  helloProblem(hello: Hello): string | null {
    const address = shieldAddressProblem(hello.shieldAddress);
    if (address !== null) return `shield_address: ${address}`;
    if (hello.regionCountryCode !== '' && !/^[A-Z]{2}$/.test(hello.regionCountryCode)) return 'region_country_code: an ISO 3166-1 alpha-2 code';
    if (!printable(hello.regionName, 100)) return 'region_name: at most 100 printable characters';
    if (!printable(hello.regionCity, 100)) return 'region_city: at most 100 printable characters';
    return null;
  }

  attach(stream: AgentStream): null {
    this.#streams.add(stream);
    return null;
  }

  detach(stream: AgentStream): void {
    this.#streams.delete(stream);
  }

  async open(stream: AgentStream): Promise<void> {
    const map = this.#sent ?? await this.#current();
    this.#sent = map;
    if (!stream.closed) stream.write(map.bytes);
  }

  /** What the node measured: the latency to each region it reached, null for each region it could not (shield-regions' `available`). */
  onHeartbeat(stream: AgentStream, _state: null, heartbeat: Heartbeat): void {
    const latencies: Record<string, number | null> = {};
    for (const region of heartbeat.unreachableShieldRegions.slice(0, MAX_LATENCIES)) if (REGION.test(region)) latencies[region] = null;
    for (const l of heartbeat.shieldLatencies.slice(0, MAX_LATENCIES)) {
      if (REGION.test(l.region) && l.latencyMs <= MAX_LATENCY_MS) latencies[l.region] = l.latencyMs;
    }
    this.#context.writer.node(stream, { shield_latencies: latencies }, false);
  }

  /** Each tick: the map anew, sent to every stream of this replica when it changed. */
  async poll(): Promise<void> {
    const map = await this.#current();
    if (this.#sent !== null && this.#sent.key === map.key) return;
    this.#sent = map;
    for (const stream of this.#streams) if (stream.welcomed && !stream.closed) stream.write(map.bytes);
  }

  async #current(): Promise<{ key: string; bytes: Uint8Array }> {
    const rows = await this.#context.em().execute<ShieldRow[]>(
      `select id, region, shield_address from cdn_edge_node where status = 'online' and shield_address is not null order by region, id`,
    );
    const regions = new Map<string, { nodeId: string; address: string }[]>();
    for (const r of rows) {
      let nodes = regions.get(r.region);
      if (nodes === undefined) regions.set(r.region, (nodes = []));
      nodes.push({ nodeId: r.id, address: r.shield_address });
    }
    const keys = shieldHopKeys(this.#base, this.#context.clock.now());
    const value = { regions: [...regions].map(([region, nodes]) => ({ region, nodes })), hopKeys: keys };
    const key = JSON.stringify([value.regions, keys.map((k) => k.toString('hex'))]);
    return { key, bytes: encodeResponse(create(ConnectResponseSchema, { message: { case: 'shieldMap', value } })) };
  }
}
