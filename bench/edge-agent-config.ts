// The agent's cost of applying configuration pushes with many endpoints:
// a full push of N endpoints, a one-endpoint delta on it (incremental: one
// endpoint parsed and compiled), the same delta as a whole snapshot through
// applyConfig (every endpoint parsed and compiled: what the agent would do
// without the incremental path), and the disk writes of each.
// Run: npx node bench/edge-agent-config.ts [--endpoints 10000] [--rounds 5]
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configDigest, splitSnapshot } from '../shared/src/config/resources.ts';
import { EdgeAgent } from '../edge-agent/src/agent.ts';
import type { ConfigPush } from '../edge-agent/src/control/resource-set.ts';
import { numberFlag } from './lib/cli.ts';

const N = numberFlag('endpoints', 10_000);
const ROUNDS = numberFlag('rounds', 5);

function endpoint(i: number, tag: string) {
  return {
    id: `ep-${i}`, hostname: `h${i}.cdn.test`, default_origin_id: `o-${i}`,
    origins: [{ id: `o-${i}`, host: `origin${i}.example.com`, custom_headers: { 'X-Tag': tag } }, { id: `o2-${i}`, host: `b${i}.example.com` }],
    routes: [{ id: `r-${i}`, origin_id: `o2-${i}`, match: { paths: ['/api/*'] } }],
    cache_rules: [{ id: `c-${i}`, ttl_seconds: 60, match: { paths: ['/static/*', '*.jpg'] } }],
    custom_domains: [{ hostname: `www.c${i}.test` }],
  };
}

const snapshotOf = (tags: string[]) => ({ endpoints: tags.map((tag, i) => endpoint(i, tag)) });
type Snap = ReturnType<typeof snapshotOf>;
const split = (s: Snap) => splitSnapshot(s as unknown as Parameters<typeof splitSnapshot>[0]);

function push(version: number, base: Snap | null, baseVersion: number, next: Snap): ConfigPush {
  const after = split(next);
  const before = base ? new Map(split(base).map((r) => [r.key, r.sha256])) : null;
  const keys = new Set(after.map((r) => r.key));
  return {
    version, full: base === null, baseVersion,
    resources: after.filter((r) => before?.get(r.key) !== r.sha256).map((r) => ({ ...r, version })),
    removed: before ? [...before.keys()].filter((k) => !keys.has(k)) : [],
    digest: configDigest(after.map((r) => [r.key, r.sha256])), resourceCount: after.length,
  };
}

function diskBytes(dir: string): number {
  let total = 0;
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const s = statSync(p);
      if (s.isDirectory()) walk(p);
      else total += s.size;
    }
  };
  walk(dir);
  return total;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x: number) => `${x.toFixed(1)} ms`;

const dir = mkdtempSync(join(tmpdir(), 'bench-agent-config-'));
try {
  const agent = new EdgeAgent({ dataDir: dir, memoryBytes: 1 << 20, maxObjectBytes: 1 << 16, healthProbes: false });
  const tags = Array.from({ length: N }, () => 'v0');
  let current = snapshotOf(tags);
  const fullPush = push(1, null, 0, current);
  const fullWire = fullPush.resources.reduce((a, r) => a + r.body.length + r.key.length + 64, 0);
  let t0 = performance.now();
  agent.applyConfigPush(fullPush);
  const fullApply = performance.now() - t0;
  t0 = performance.now();
  await agent.persisted();
  const fullPersist = performance.now() - t0;
  const afterFull = diskBytes(dir);

  const delta: number[] = [];
  const persist: number[] = [];
  const whole: number[] = [];
  let deltaWire = 0;
  let written = 0;
  let version = 1;
  for (let r = 0; r < ROUNDS; r++) {
    const nextTags = [...tags];
    nextTags[r] = `v${r + 1}`;
    tags.splice(0, tags.length, ...nextTags);
    const next = snapshotOf(tags);
    const p = push(version + 1, current, version, next);
    deltaWire = p.resources.reduce((a, x) => a + x.body.length + x.key.length + 64, 0) + p.removed.reduce((a, k) => a + k.length, 0);
    const before = diskBytes(dir);
    t0 = performance.now();
    const result = agent.applyConfigPush(p);
    delta.push(performance.now() - t0);
    if (result.compiled !== 1) throw new Error(`expected one endpoint compiled, got ${result.compiled}`);
    t0 = performance.now();
    await agent.persisted();
    persist.push(performance.now() - t0);
    written = Math.max(0, diskBytes(dir) - before);
    version++;
    current = next;
    // The same change as a whole snapshot, parsed and compiled from scratch (not persisted).
    t0 = performance.now();
    agent.applyConfig({ version, ...next }, version, { persist: false });
    whole.push(performance.now() - t0);
    // Back to a control-plane state the next delta can apply on.
    agent.applyConfigPush(push(version, null, 0, next));
  }
  console.log(`edge agent configuration pushes, ${N} endpoints (${ROUNDS} rounds, medians)`);
  console.log(`  full push: ${(fullWire / 1048576).toFixed(1)} MiB of resources, applied (parse + compile + swap) in ${ms(fullApply)}, written to disk in ${ms(fullPersist)} (${(afterFull / 1048576).toFixed(1)} MiB)`);
  console.log(`  one-endpoint delta: ${deltaWire} bytes of resources (${((deltaWire / fullWire) * 100).toFixed(3)}% of the full push), applied in ${ms(median(delta))}, written in ${ms(median(persist))} (disk +${written} bytes net: one body + the manifest rewritten)`);
  console.log(`  same change as a whole snapshot through applyConfig (parse + compile everything): ${ms(median(whole))}`);
  await agent.close(0);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
