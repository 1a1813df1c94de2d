// Where a `.cpuprofile` spends its time, as text: self time per function, time
// including callees per function, and self time per package or source folder.
// Run: node bench/lib/profile-summary.ts <file.cpuprofile> [--top 40] [--match <text>]
// (--match: inclusive time of the functions whose name or file contains the text only).
import fs from 'node:fs';

/** The most one sample may count for (the bench samples every 100 µs). */
const CAP_US = 2_000;

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }

/** The part of a script URL that says where it comes from: `pkg/<name>` for node_modules, the repo-relative path otherwise. */
function origin(url: string): string {
  if (!url) return '(native)';
  const modules = url.lastIndexOf('node_modules/');
  if (modules !== -1) {
    const rest = url.slice(modules + 'node_modules/'.length).split('/');
    return `pkg/${rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  if (url.startsWith('node:')) return url;
  const repo = url.match(/\/(control-plane|edge-agent|shared|bench|test)\/(.*)$/);
  return repo ? `${repo[1]}/${repo[2]}` : url.replace(/^file:\/\//, '');
}

export function summarizeProfile(profile: { nodes: Node[]; samples: number[]; timeDeltas: number[] }, top = 40, match?: string): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  // A sample lasts until the next one (timeDeltas[i] is the time *before* sample i, as DevTools reads it): charging it
  // the time before would give the first function to run after an idle wait (onStreamRead, say) the whole wait.
  // A gap far longer than the sampling interval is the sampler not running (the process descheduled, the profiler's
  // own pauses), not that function running: each sample counts at most CAP_US.
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + Math.min(profile.timeDeltas[i + 1] ?? 0, CAP_US)));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const name = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${origin(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
  const selfBy = new Map<string, number>();
  const inclusiveBy = new Map<string, number>();
  const folderBy = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    selfBy.set(name(n), (selfBy.get(name(n)) ?? 0) + us);
    // A package as a whole; our own and Node's code by folder.
    const source = origin(n.callFrame.url);
    const folder = source.startsWith('pkg/') || !source.includes('/') ? source : source.replace(/[^/]*$/, '');
    folderBy.set(folder, (folderBy.get(folder) ?? 0) + us);
    // Each function once per stack (recursion counted once).
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const key = name(byId.get(at)!);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusiveBy.set(key, (inclusiveBy.get(key) ?? 0) + us);
    }
  }
  const table = (title: string, rows: Map<string, number>, filter = (_: string) => true) => [
    `## ${title}`, ...[...rows].filter(([k]) => filter(k)).sort((a, b) => b[1] - a[1]).slice(0, top)
      .map(([k, us]) => `${(us / 1000).toFixed(1).padStart(9)} ms ${((100 * us) / total).toFixed(1).padStart(5)}%  ${k}`), ''];
  return [
    `total sampled ${(total / 1000).toFixed(1)} ms, ${profile.samples.length} samples`, '',
    ...(match ? table(`inclusive, matching ${match}`, inclusiveBy, (k) => k.includes(match)) : [
      ...table('self time by function', selfBy),
      ...table('self time by origin', folderBy),
      ...table('inclusive time by function', inclusiveBy),
    ]),
  ].join('\n');
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const flag = (name: string) => { const i = args.indexOf(`--${name}`); return i === -1 ? undefined : args[i + 1]; };
  const file = args.find((a, i) => !a.startsWith('--') && !args[i - 1]?.startsWith('--'));
  if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [--top 40] [--match text]');
  console.log(summarizeProfile(JSON.parse(fs.readFileSync(file, 'utf8')), Number(flag('top') ?? 40), flag('match')));
}
