// Steady traffic for fault and soak runs: named streams of requests, each a
// few concurrent loops calling `send` until stopped, every answer recorded
// with its time, so a run can say what was served and what failed in any
// window (during a fault, after it). `send` resolves the status (0: no
// answer at all); what counts as served is the stream's `ok`.
import { setTimeout as sleep } from 'node:timers/promises';

export interface TrafficStream {
  name: string;
  concurrency: number;
  send: (n: number) => Promise<number>;
  /** Whether a status counts as served (default: below 400). */
  ok?: (status: number) => boolean;
  /** Pause between one loop's requests (default 5 ms: steady, not flat out on a shared machine). */
  pauseMs?: number;
}

export interface Sample { at: number; stream: string; status: number; ok: boolean }

export interface WindowCount { served: number; failed: number; statuses: Record<string, number> }

export interface Traffic {
  samples: Sample[];
  /** Stops every loop and waits for the requests in flight. */
  stop(): Promise<void>;
  /** The stream's answers between two times (ms since the epoch; `to` open-ended when omitted). */
  count(stream: string, from?: number, to?: number): WindowCount;
  /** The first served answer of the stream at or after `from` (its time), if any. */
  firstServedAfter(stream: string, from: number): number | undefined;
}

export function startTraffic(streams: TrafficStream[]): Traffic {
  const samples: Sample[] = [];
  let running = true;
  let sequence = 0;
  const loops: Promise<void>[] = [];
  for (const stream of streams) {
    const ok = stream.ok ?? ((status: number) => status > 0 && status < 400);
    for (let i = 0; i < stream.concurrency; i++) {
      loops.push((async () => {
        while (running) {
          let status = 0;
          try {
            status = await stream.send(sequence++);
          } catch {
            status = 0;
          }
          samples.push({ at: Date.now(), stream: stream.name, status, ok: ok(status) });
          // A failure waits a little longer: a loop must not spin against a server that is down.
          await sleep(status === 0 ? 50 : stream.pauseMs ?? 5);
        }
      })());
    }
  }
  return {
    samples,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
    count(name, from = 0, to = Infinity) {
      const out: WindowCount = { served: 0, failed: 0, statuses: {} };
      for (const s of samples) {
        if (s.stream !== name || s.at < from || s.at > to) continue;
        if (s.ok) out.served++;
        else out.failed++;
        out.statuses[s.status] = (out.statuses[s.status] ?? 0) + 1;
      }
      return out;
    },
    firstServedAfter(name, from) {
      return samples.find((s) => s.stream === name && s.at >= from && s.ok)?.at;
    },
  };
}
