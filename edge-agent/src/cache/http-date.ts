// The one HTTP-date parser of the agent (RFC 9110 §5.6.7), for Expires, Date,
// Last-Modified, If-Modified-Since and Retry-After. Only the three forms the
// RFC defines are dates, exactly as written there:
//   IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
//   RFC 850      Sunday, 06-Nov-94 08:49:37 GMT
//   asctime      Sun Nov  6 08:49:37 1994
// Anything else (UTC for GMT, a missing comma, dashes in an IMF-fixdate, a
// one-digit hour, doubled spaces, a weekday that is not the date's, 31 April)
// is not a date: Date.parse accepts all of those and more.

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const LONG_DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
const RFC850 = /^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{2})-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
const ASCTIME = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{2}| \d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/;

const FIFTY_YEARS_MS = 50 * 365.2425 * 86_400_000;

/**
 * Milliseconds since the epoch of an HTTP-date, or NaN when the text is not
 * one. now (ms) places an RFC 850 two-digit year: a year that would be more
 * than 50 years in the future is the most recent past year with those digits.
 */
export function httpDateMs(text: string, now: number = Date.now()): number {
  let m = IMF_FIXDATE.exec(text);
  if (m !== null) return checked(m[1], DAYS, Number(m[4]), m[3], m[2], m[5], m[6], m[7]);
  m = RFC850.exec(text);
  if (m !== null) {
    // The two digits in the century of now, moved a century back when that is more than 50 years ahead,
    // or a century forward when it is more than 50 years behind (then it is less than 50 years ahead).
    const nowYear = new Date(now).getUTCFullYear();
    let year = nowYear - (nowYear % 100) + Number(m[4]);
    const candidate = checked(m[1], LONG_DAYS, year, m[3], m[2], m[5], m[6], m[7], false);
    if (Number.isNaN(candidate)) return candidate;
    if (candidate - now > FIFTY_YEARS_MS) year -= 100;
    else if (now - candidate > FIFTY_YEARS_MS) year += 100;
    return checked(m[1], LONG_DAYS, year, m[3], m[2], m[5], m[6], m[7]);
  }
  m = ASCTIME.exec(text);
  if (m !== null) return checked(m[1], DAYS, Number(m[7]), m[2], m[3].trim(), m[4], m[5], m[6]);
  return Number.NaN;
}

/** The instant, or NaN for a day the month lacks, an hour past 23, a minute past 59, a second past 60, or a weekday that is not the date's. */
function checked(dayName: string, names: string[], year: number, month: string, day: string, hour: string, minute: string, second: string, weekday = true): number {
  const mon = MONTHS.indexOf(month);
  const d = Number(day);
  const h = Number(hour);
  const min = Number(minute);
  let s = Number(second);
  if (d < 1 || h > 23 || min > 59 || s > 60) return Number.NaN;
  if (s === 60) s = 59; // a leap second: the date library has none
  const date = new Date(0);
  date.setUTCFullYear(year, mon, d);
  date.setUTCHours(h, min, s, 0);
  if (date.getUTCDate() !== d || date.getUTCMonth() !== mon) return Number.NaN; // 31 April, 29 February of a common year
  if (weekday && names[date.getUTCDay()] !== dayName) return Number.NaN;
  return date.getTime();
}

/**
 * Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, as the delay
 * in ms from now (0 for a date already past); null when absent or invalid.
 */
export function retryAfterMs(value: string | undefined, now: number = Date.now()): number | null {
  if (value === undefined) return null;
  if (/^\d+$/.test(value)) return Math.min(Number(value), 2_147_483) * 1000;
  const at = httpDateMs(value, now);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}
