// The metrics routes' periods (document 3 §4.13) as time ranges, and the
// bandwidth series' granularities. Short periods are the last N minutes, the
// current one included ([now's minute + 1 − N, now's minute + 1)); the 7- and
// 30-day periods start at a whole hour (older minutes are rolled up into
// hours). A series has one point per step, the last one the step now falls in.
import { DAY, HOUR, MINUTE } from '../core/clock.ts';
import type { TimeRange } from './rollup-store.ts';

export const PERIODS = { last_1h: HOUR, last_6h: 6 * HOUR, last_24h: DAY, last_7d: 7 * DAY, last_30d: 30 * DAY } as const;
export type Period = keyof typeof PERIODS;
export const SHORT_PERIODS = ['last_1h', 'last_6h', 'last_24h', 'last_7d'] as const;
export const ALL_PERIODS = ['last_1h', 'last_6h', 'last_24h', 'last_7d', 'last_30d'] as const;

export const GRANULARITIES = { '1m': MINUTE, '5m': 5 * MINUTE, '15m': 15 * MINUTE, '1h': HOUR, '6h': 6 * HOUR, '1d': DAY } as const;
export type Granularity = keyof typeof GRANULARITIES;
export const DEFAULT_GRANULARITY: Record<Period, Granularity> = { last_1h: '1m', last_6h: '5m', last_24h: '15m', last_7d: '1h', last_30d: '6h' };
/** The most points a series may have (5-minute steps over 7 days). */
export const MAX_POINTS = 2_016;

const floorTo = (ms: number, step: number) => ms - (ms % step);

export function periodRange(period: Period, now: number): TimeRange {
  const to = floorTo(now, MINUTE) + MINUTE;
  const length = PERIODS[period];
  const from = length >= 7 * DAY ? floorTo(to - length, HOUR) : to - length;
  return { from, to };
}

/** The series' steps: `points` of `step`, the last the one now falls in; null when there would be more than MAX_POINTS. */
export function seriesRange(period: Period, granularity: Granularity, now: number): { range: TimeRange; step: number; points: number } | null {
  const step = GRANULARITIES[granularity];
  const points = Math.ceil(PERIODS[period] / step);
  if (points > MAX_POINTS) return null;
  const last = floorTo(now, step);
  return { range: { from: last - (points - 1) * step, to: floorTo(now, MINUTE) + MINUTE }, step, points };
}
