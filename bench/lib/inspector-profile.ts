// A CPU profile of another Node process over a chosen stretch only (not its
// start-up or idle time, as `--cpu-prof` would): the process runs with
// `--inspect=127.0.0.1:<port>`, and this attaches over the inspector's
// WebSocket (Chrome DevTools Protocol, Profiler domain) to start and stop
// sampling around the rounds being measured. The profile is written as a
// `.cpuprofile` file (Chrome DevTools, speedscope, or `summarizeProfile`).
import fs from 'node:fs';

/** Node flag that opens the inspector of a child on `port` (pass it on the child's command line). */
export const inspectFlag = (port: number) => `--inspect=127.0.0.1:${port}`;

interface CdpSession { call(method: string, params?: Record<string, unknown>): Promise<any>; close(): void }

async function connect(port: number): Promise<CdpSession> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(5_000) })).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`inspector on ${port}: no connection in 5 s`)), 5_000);
    ws.onopen = () => { clearTimeout(timer); resolve(); };
    ws.onerror = () => { clearTimeout(timer); reject(new Error(`inspector on ${port}: connection failed`)); };
  });
  let next = 1;
  const waiting = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  ws.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiter = message.id === undefined ? undefined : waiting.get(message.id);
    if (!waiter) return;
    waiting.delete(message.id!);
    if (message.error) waiter.reject(new Error(message.error.message)); else waiter.resolve(message.result);
  };
  return {
    call(method, params = {}) {
      const id = next++;
      ws.send(JSON.stringify({ id, method, params }));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => { waiting.delete(id); reject(new Error(`inspector on ${port}: ${method} unanswered in 60 s`)); }, 60_000);
        waiting.set(id, { resolve: (v) => { clearTimeout(timer); resolve(v); }, reject: (e) => { clearTimeout(timer); reject(e); } });
      });
    },
    close: () => ws.close(),
  };
}

/**
 * Profiles the process whose inspector listens on `port` across several stretches: `start()` before each, `pause()`
 * after it; `save(file)` writes the samples of every stretch as one profile. `intervalUs` is the sampling interval.
 */
export async function stretchProfiler(port: number, intervalUs = 100) {
  const session = await connect(port);
  await session.call('Profiler.enable');
  await session.call('Profiler.setSamplingInterval', { interval: intervalUs });
  // Allocations too (V8's sampling heap profiler, one sample per 4 KiB allocated on average, collected objects included): bytes allocated by function.
  await session.call('HeapProfiler.enable');
  const profiles: any[] = [];
  const allocated = new Map<string, number>();
  return {
    async start() {
      await session.call('HeapProfiler.startSampling', { samplingInterval: 4_096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
      await session.call('Profiler.start');
    },
    async pause() {
      profiles.push((await session.call('Profiler.stop')).profile);
      const { profile } = await session.call('HeapProfiler.stopSampling');
      const walk = (node: any) => {
        const frame = node.callFrame;
        const key = `${frame.functionName || '(anonymous)'} ${String(frame.url).replace(/^.*node_modules\//, 'pkg/').replace(/^.*\/(control-plane|shared|bench)\//, '$1/')}:${frame.lineNumber + 1}`;
        if (node.selfSize) allocated.set(key, (allocated.get(key) ?? 0) + node.selfSize);
        for (const child of node.children ?? []) walk(child);
      };
      walk(profile.head);
    },
    /** Writes the CPU profile to `file`, and the bytes allocated by function (sampled) to `file`.allocations.txt. */
    save(file: string) {
      fs.writeFileSync(file, JSON.stringify(mergeProfiles(profiles)));
      const total = [...allocated.values()].reduce((a, b) => a + b, 0);
      fs.writeFileSync(`${file}.allocations.txt`, [`sampled allocations ${(total / 1024 / 1024).toFixed(1)} MiB`,
        ...[...allocated].sort((a, b) => b[1] - a[1]).slice(0, 80).map(([k, bytes]) => `${(bytes / 1024).toFixed(0).padStart(9)} KiB  ${k}`)].join('\n'));
      session.close();
    },
  };
}

/** Several profiles of one process as one: their nodes renumbered, samples and time deltas end to end. */
function mergeProfiles(profiles: any[]): any {
  if (profiles.length === 1) return profiles[0];
  const merged = { nodes: [] as any[], samples: [] as number[], timeDeltas: [] as number[], startTime: profiles[0]?.startTime ?? 0, endTime: 0 };
  let offset = 0;
  let elapsed = 0;
  for (const p of profiles) {
    const root = p.nodes[0].id;
    for (const node of p.nodes) {
      const copy = { ...node, id: node.id + offset, children: (node.children ?? []).map((c: number) => c + offset) };
      if (merged.nodes.length && node.id === root) {
        // Every profile's root hangs under the first one's, so tools see one tree.
        merged.nodes[0].children.push(copy.id);
        copy.callFrame = { ...copy.callFrame, functionName: '(stretch)' };
      }
      merged.nodes.push(copy);
    }
    merged.samples.push(...p.samples.map((s: number) => s + offset));
    merged.timeDeltas.push(...p.timeDeltas);
    elapsed += p.endTime - p.startTime;
    offset += Math.max(...p.nodes.map((n: any) => n.id));
  }
  merged.endTime = merged.startTime + elapsed;
  return merged;
}
