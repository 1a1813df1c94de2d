// The strict HTTP-date parser (RFC 9110 §5.6.7) and Retry-After (§10.2.3).
import t from 'tap';
import { httpDateMs, retryAfterMs } from './http-date.ts';

const NOV_6_1994 = Date.UTC(1994, 10, 6, 8, 49, 37);
const NOW_2026 = Date.UTC(2026, 10, 27, 12, 0, 0);

t.test('RFC 9110 §5.6.7: the three forms are dates', async (t) => {
  t.equal(httpDateMs('Sun, 06 Nov 1994 08:49:37 GMT'), NOV_6_1994, 'IMF-fixdate');
  t.equal(httpDateMs('Sunday, 06-Nov-94 08:49:37 GMT', NOW_2026), NOV_6_1994, 'RFC 850 (94: 1994, 2094 being more than 50 years ahead)');
  t.equal(httpDateMs('Sun Nov  6 08:49:37 1994'), NOV_6_1994, 'asctime with a one-digit day');
  t.equal(httpDateMs('Thu Nov 26 08:49:37 2026'), Date.UTC(2026, 10, 26, 8, 49, 37), 'asctime with a two-digit day');
  t.equal(httpDateMs('Thu, 31 Dec 2026 23:59:60 GMT'), Date.UTC(2026, 11, 31, 23, 59, 59), 'a leap second counts as :59');
  t.equal(httpDateMs('Tue, 29 Feb 2028 00:00:00 GMT'), Date.UTC(2028, 1, 29), '29 February of a leap year');
});

t.test('RFC 9111 §5.3 with RFC 9110 §5.6.7: every deviation is not a date', async (t) => {
  for (const bad of [
    'Sun, 06 Nov 1994 08:49:37 UTC', // UTC for GMT
    'Sun 06 Nov 1994 08:49:37 GMT', // missing comma
    'Sun, 06-Nov-1994 08:49:37 GMT', // dashes in an IMF-fixdate
    'Sun, 06 Nov 1994 8:49:37 GMT', // one-digit hour
    'Sun,  06 Nov 1994 08:49:37 GMT', // doubled space
    'Sun, 06 Nov 1994 08:49:37 GMT ', // trailing space
    'Sun, 6 Nov 1994 08:49:37 GMT', // one-digit day
    'sun, 06 nov 1994 08:49:37 gmt', // case
    'Mon, 06 Nov 1994 08:49:37 GMT', // not that day's weekday
    'Sun, 06 Nov 94 08:49:37 GMT', // two-digit year in an IMF-fixdate
    'Sun, 06 Nov 1994 24:00:00 GMT', // hour 24
    'Sun, 06 Nov 1994 08:60:00 GMT', // minute 60
    'Thu, 31 Apr 2026 00:00:00 GMT', // a day April lacks
    'Sun, 29 Feb 2026 00:00:00 GMT', // 29 February of a common year
    'Sun, 06 Nov 1994 08:49:37 +0000',
    '1994-11-06T08:49:37Z', // ISO 8601
    'Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT', // two members
    'Sun Nov 6 08:49:37 1994', // asctime day without its space
    'Sun, 06-Nov-94 08:49:37 GMT', // RFC 850 with a short day name
    'Sunday, 06 Nov 1994 08:49:37 GMT',
    '0', '-1', '', '784111777',
  ]) t.ok(Number.isNaN(httpDateMs(bad, NOW_2026)), JSON.stringify(bad));
});

t.test('RFC 9110 §5.6.7: an RFC 850 two-digit year more than 50 years ahead is the last past year with those digits', async (t) => {
  t.equal(httpDateMs('Saturday, 01-Jan-50 00:00:00 GMT', NOW_2026), Date.UTC(2050, 0, 1), '50 in 2026 is 2050 (24 years ahead), not 1950');
  t.equal(httpDateMs('Wednesday, 01-Jan-76 00:00:00 GMT', NOW_2026), Date.UTC(2076, 0, 1), '76 in 2026 is 2076 (49 years ahead)');
  t.equal(httpDateMs('Saturday, 01-Jan-77 00:00:00 GMT', NOW_2026), Date.UTC(1977, 0, 1), '77 in 2026 is 1977 (2077 is more than 50 years ahead)');
  t.equal(httpDateMs('Thursday, 01-Jan-26 00:00:00 GMT', NOW_2026), Date.UTC(2026, 0, 1));
  t.equal(httpDateMs('Friday, 01-Jan-00 00:00:00 GMT', Date.UTC(2090, 0, 1)), Date.UTC(2100, 0, 1), '00 seen in 2090 is 2100, not 2000 (90 years back)');
  t.ok(Number.isNaN(httpDateMs('Sunday, 01-Jan-50 00:00:00 GMT', NOW_2026)), 'the weekday is checked against the year chosen (1 January 1950 was a Sunday)');
});

t.test('RFC 9110 §10.2.3: Retry-After is delay-seconds or an HTTP-date', async (t) => {
  t.equal(retryAfterMs('120', NOW_2026), 120_000);
  t.equal(retryAfterMs('0', NOW_2026), 0);
  t.equal(retryAfterMs('Fri, 27 Nov 2026 12:00:30 GMT', NOW_2026), 30_000);
  t.equal(retryAfterMs('Fri, 27 Nov 2026 11:00:00 GMT', NOW_2026), 0, 'a date already past: no wait');
  t.equal(retryAfterMs('Fri, 27 Nov 2026 12:00:30 UTC', NOW_2026), null, 'not a date: ignored');
  t.equal(retryAfterMs('1.5', NOW_2026), null);
  t.equal(retryAfterMs('-1', NOW_2026), null);
  t.equal(retryAfterMs(undefined, NOW_2026), null);
});
