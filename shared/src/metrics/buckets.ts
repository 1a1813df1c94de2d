// Response-time histogram bounds shared by the edge agent (which counts into
// them) and the control plane (which aggregates agents' histograms), DESIGN §7.

/** Upper bounds in ms of the response-time buckets; one more bucket counts the rest (+Inf). */
export const RESPONSE_TIME_BUCKETS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000] as const;

/** Index of the bucket a duration falls in (RESPONSE_TIME_BUCKETS_MS.length for +Inf). */
export function responseTimeBucket(ms: number): number {
  const b = RESPONSE_TIME_BUCKETS_MS;
  for (let i = 0; i < b.length; i++) if (ms <= b[i]) return i;
  return b.length;
}
