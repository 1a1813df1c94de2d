// How soon V8 collects the control plane's old generation. By default V8 lets
// it grow to about twice what survived the last full collection (its factor
// adapts between 1.1 and 4) before collecting again. Under sustained purges
// to a thousand agents the control plane promotes about 1 MB of short-lived
// objects a second (acks decoded and buffered while a scavenge runs, the
// flushes' JSON), so its RSS climbed by 100 MB and more between full
// collections: peaks of 430-460 MB from about 350 (bench/control-channel.ts,
// issue 12's goal is under 400). With the factor fixed at 1.5 RSS stays
// under 390 MB there (90 s measured). 1.25 held it near 350 MB but doubled
// the CPU of a 100-endpoint publish (89 → 167 ms: full collections while a
// compile legitimately grows the heap); 1.5 costs it nothing measurable.
//
// The flag is read at each collection, so setting it once the process runs
// takes effect. An operator's own --heap-growing-percent on the command line wins.
//
// The young generation is the other half. On a host with this much memory
// Node 24 lets it grow to 64 MB per semi-space (a 128 MB new space), and a
// control plane that allocates briskly at start and under load keeps it: RSS
// 242 MB with no agent connected, 383-393 MB under sustained purges to 1,000
// agents. Capped at 16 MB per semi-space: 205 MB and 284 MB, at no CPU cost
// the paired floor comparison could tell apart from the host's noise (real ÷
// floor 0.96x that run; 1.09x uncapped). Its size is fixed when the process
// starts (setting --max-semi-space-size once it runs does nothing, and
// re-executing the process would lose npm start's IPC channel), so the
// launchers pass YOUNG_GENERATION_FLAG: `npm run control-plane`, `npm start`
// and the benchmark; a control plane started without it says so in its log.
import { setFlagsFromString } from 'node:v8';

/** Megabytes per semi-space of V8's young generation (its new space is twice this). */
export const SEMI_SPACE_MB = 16;
/** The Node flag every launcher of the control plane passes (package.json's control-plane script spells it out). */
export const YOUNG_GENERATION_FLAG = `--max-semi-space-size=${SEMI_SPACE_MB}`;

/** Whether this process started with a cap on its young generation (any value: an operator's own wins). */
export function youngGenerationCapped(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): boolean {
  return [...execArgv, ...nodeOptions.split(/\s+/)].some((arg) => /^--max[-_]semi[-_]space[-_]size\b/.test(arg));
}

export const HEAP_GROWING_PERCENT = 50;

/** Sets V8's old-generation growing factor for this process unless the command line set one; true when it did. */
export function tuneHeap(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((arg) => /^--heap[-_]growing[-_]percent\b/.test(arg))) return false;
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return true;
}
