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
// takes effect (unlike the young generation's size, fixed at start). An
// operator's own --heap-growing-percent on the command line wins.
import { setFlagsFromString } from 'node:v8';

export const HEAP_GROWING_PERCENT = 50;

/** Sets V8's old-generation growing factor for this process unless the command line set one; true when it did. */
export function tuneHeap(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((arg) => /^--heap[-_]growing[-_]percent\b/.test(arg))) return false;
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return true;
}
