// A writer part (channel-writer.ts) for readings the agents send with every
// heartbeat where only the latest counts: one per key (a thing and a node),
// buffered until the heartbeat-rate flush, the later reading of a key
// replacing the earlier. Nodes going offline are handed to the write with the
// readings, so what they reported can be re-aggregated. Origin health probes
// and log drain delivery states use it.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ChannelWriter, FleetChange, PartBatch, WriterPart } from './channel-writer.ts';

export type LatestWrite<T> = (em: EntityManager, readings: readonly T[], offline: readonly string[], now: Date) => Promise<void>;

export class LatestPerNode<T> implements WriterPart {
  readonly #writer: ChannelWriter;
  readonly #key: (reading: T) => string;
  readonly #write: LatestWrite<T>;
  #readings = new Map<string, T>();

  /** Joins the writer; `write` gets the readings taken (possibly none) and the nodes gone offline (possibly none). */
  constructor(writer: ChannelWriter, key: (reading: T) => string, write: LatestWrite<T>) {
    this.#writer = writer;
    this.#key = key;
    this.#write = write;
    writer.add(this);
  }

  get urgent(): boolean {
    return false;
  }

  get routine(): boolean {
    return this.#readings.size > 0;
  }

  add(reading: T): void {
    this.#readings.set(this.#key(reading), reading);
    this.#writer.later();
  }

  take(routine: boolean, fleet: FleetChange): PartBatch | null {
    const readings = routine ? [...this.#readings.values()] : [];
    if (!readings.length && !fleet.offline.length) return null;
    if (routine) this.#readings = new Map();
    return {
      write: (em, now) => this.#write(em, readings, fleet.offline, now),
      putBack: () => {
        // Readings that came in since are later: they win.
        for (const r of readings) {
          const key = this.#key(r);
          if (!this.#readings.has(key)) this.#readings.set(key, r);
        }
        if (readings.length) this.#writer.later();
      },
    };
  }
}
