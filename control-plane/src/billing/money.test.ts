// Money arithmetic (money.ts): the ISO 4217 table, JSON numbers to minor units
// and back exactly, the one rounding rule (half up), allocation that always
// adds up, and the edges: NaN, negatives, too many decimals, big values.
import t from 'tap';
import {
  BASIS_POINTS, CURRENCIES, currencyOf, isCurrencyCode, MAX_MINOR, MoneyError, percentOf, prorate, split, sumMinor, toMajor, toMinor, toScaledInteger,
} from './money.ts';

t.test('the currency table is ISO 4217 with its exponents', async (t) => {
  t.same(currencyOf('EUR'), { code: 'EUR', exponent: 2 });
  t.same(currencyOf('JPY'), { code: 'JPY', exponent: 0 });
  t.same(currencyOf('KWD'), { code: 'KWD', exponent: 3 });
  t.same(currencyOf('BHD'), { code: 'BHD', exponent: 3 });
  t.same(currencyOf('CLF'), { code: 'CLF', exponent: 4 });
  t.same(currencyOf('KRW'), { code: 'KRW', exponent: 0 });
  t.ok(CURRENCIES.size > 150, `${CURRENCIES.size} currencies`);
  for (const code of ['eur', 'XAU', 'XXX', 'ABC', 'EURO', '']) t.notOk(isCurrencyCode(code), `${code || '(empty)'} is not a currency`);
  t.throws(() => currencyOf('ABC'), MoneyError);
  const odd = [...CURRENCIES.values()].filter(({ code, exponent }) => !/^[A-Z]{3}$/.test(code) || !Number.isInteger(exponent) || exponent < 0 || exponent > 4);
  t.same(odd, [], 'three capital letters and an exponent of 0..4 each');
});

t.test('toMinor reads a JSON number exactly in minor units', async (t) => {
  const cases: [number, string, number][] = [
    [9.99, 'EUR', 999], [0.1, 'EUR', 10], [0.3, 'EUR', 30], [0.07, 'EUR', 7], [1.1, 'EUR', 110], [4.35, 'EUR', 435], [1.005, 'KWD', 1005],
    [0, 'EUR', 0], [-0, 'EUR', 0], [500, 'JPY', 500], [1.125, 'KWD', 1125], [1.5, 'KWD', 1500], [12, 'EUR', 1200], [0.0001, 'CLF', 1],
    [9999999999.99, 'EUR', MAX_MINOR], [999999999999, 'JPY', MAX_MINOR], [999999999.999, 'KWD', MAX_MINOR], [1e-2, 'EUR', 1], [5e2, 'JPY', 500],
  ];
  for (const [amount, currency, minor] of cases) t.equal(toMinor(amount, currency), minor, `${amount} ${currency} → ${minor}`);
  // What floating point would get wrong: 4.35 * 100 = 434.99999999999994, 1.005 * 1000 = 1004.9999999999999.
  t.not(4.35 * 100, 435);
});

t.test('toMinor refuses NaN, infinities, negatives, too many decimals and amounts beyond the maximum', async (t) => {
  const refusals: [number, string, RegExp][] = [
    [Number.NaN, 'EUR', /finite/], [Number.POSITIVE_INFINITY, 'EUR', /finite/], [Number.NEGATIVE_INFINITY, 'EUR', /finite/],
    [-0.01, 'EUR', /negative/], [-1, 'JPY', /negative/],
    [9.999, 'EUR', /at most 2 decimal places/], [0.1 + 0.2, 'EUR', /at most 2 decimal places/], [1.5, 'JPY', /whole number/], [1.0001, 'KWD', /at most 3/],
    [1e-7, 'EUR', /at most 2/], [0.00001, 'CLF', /at most 4/],
    [10000000000, 'EUR', /at most 9999999999\.99/], [1e12, 'JPY', /at most 999999999999/], [1e21, 'EUR', /at most/], [Number.MAX_VALUE, 'EUR', /at most/],
  ];
  for (const [amount, currency, message] of refusals) {
    t.throws(() => toMinor(amount, currency), { name: 'MoneyError', message }, `${amount} ${currency}`);
  }
  t.throws(() => toMinor(1, 'ABC'), { name: 'MoneyError', message: /ISO 4217/ });
  t.throws(() => toMinor('9.99' as never, 'EUR'), MoneyError);
});

t.test('toMajor shows minor units as the JSON number they stand for, and reads back exactly', async (t) => {
  t.equal(toMajor(999, 'EUR'), 9.99);
  t.equal(JSON.stringify({ price: toMajor(999, 'EUR') }), '{"price":9.99}');
  t.equal(toMajor(500, 'JPY'), 500);
  t.equal(toMajor(1500, 'KWD'), 1.5);
  t.equal(toMajor(1, 'KWD'), 0.001);
  t.equal(toMajor(0, 'EUR'), 0);
  t.equal(toMajor(MAX_MINOR, 'EUR'), 9999999999.99);
  t.throws(() => toMajor(9.5, 'EUR'), MoneyError, 'minor units are integers');
  // Every amount round-trips: a sweep of cents plus values near the maximum, in each exponent.
  const broken: string[] = [];
  for (const currency of ['EUR', 'JPY', 'KWD', 'CLF']) {
    for (let minor = 0; minor < 20_000; minor += 7) if (toMinor(toMajor(minor, currency), currency) !== minor) broken.push(`${minor} ${currency}`);
    for (let minor = MAX_MINOR - 5_000; minor <= MAX_MINOR; minor += 3) if (toMinor(toMajor(minor, currency), currency) !== minor) broken.push(`${minor} ${currency}`);
  }
  t.same(broken, [], 'every amount of the sweep reads back as itself');
  t.equal(toScaledInteger(12.5, 2, BASIS_POINTS), 1250, 'a percentage in basis points');
  t.throws(() => toScaledInteger(100.01, 2, BASIS_POINTS), { message: /at most 100/ });
});

t.test('percentOf rounds half up to the minor unit', async (t) => {
  t.equal(percentOf(999, 1500), 150, '15 % of 9.99 = 1.4985 → 1.50');
  t.equal(percentOf(5, 5000), 3, '50 % of 0.05 = 0.025 → 0.03 (half up)');
  t.equal(percentOf(1, 5000), 1, '0.5 of a cent → 1 cent');
  t.equal(percentOf(1, 4999), 0, 'below half → 0');
  t.equal(percentOf(3, 5000), 2, '1.5 → 2');
  t.equal(percentOf(999, 10_000), 999, '100 %');
  t.equal(percentOf(999, 0), 0);
  t.equal(percentOf(1250, 3333), 417, '33.33 % of 12.50 = 4.166 → 4.17');
  t.equal(percentOf(MAX_MINOR, 9999), 999_899_999_999, 'big values stay exact (no floating point)');
  t.throws(() => percentOf(100, 10_001), MoneyError);
  t.throws(() => percentOf(100, -1), MoneyError);
  t.throws(() => percentOf(-100, 100), MoneyError);
  t.throws(() => percentOf(1.5, 100), MoneyError);
});

t.test('prorate takes the share of part in whole, rounded half up, exactly even for big products', async (t) => {
  const month = 30 * 86_400;
  t.equal(prorate(999, month / 2, month), 500, 'half of 9.99 = 4.995 → 5.00');
  t.equal(prorate(1000, 1, 3), 333);
  t.equal(prorate(1000, 2, 3), 667);
  t.equal(prorate(999, 0, month), 0);
  t.equal(prorate(999, month, month), 999);
  t.equal(prorate(MAX_MINOR, 31_535_999, 31_536_000), 999_999_968_289, 'a year less one second of the largest amount: the product needs more than 53 bits');
  t.throws(() => prorate(999, 2, 1), MoneyError);
  t.throws(() => prorate(999, 1, 0), MoneyError);
  t.throws(() => prorate(999, -1, 10), MoneyError);
});

t.test('split allocates in proportion and always adds up to the whole', async (t) => {
  t.same(split(100, [1, 1, 1]), [34, 33, 33]);
  t.same(split(101, [1, 1, 1]), [34, 34, 33]);
  t.same(split(999, [1, 1]), [500, 499]);
  t.same(split(7, [1, 2, 2]), [1, 3, 3], 'left-overs go to the largest fractions (1.4, 2.8, 2.8)');
  t.same(split(26, [1, 2, 3]), [4, 9, 13], 'a part whose share is exact gets no left-over (4.33, 8.67, 13)');
  t.same(split(7, [0, 1]), [0, 7]);
  t.same(split(0, [1, 3]), [0, 0]);
  t.same(split(MAX_MINOR, [31_535_999, 1]), [999_999_968_289, 31_710], 'fractions .21 and .79: the left-over unit goes to the second');
  const off: string[] = [];
  for (let minor = 0; minor < 2_000; minor += 13) {
    for (const ratios of [[1, 2, 3], [5, 5], [1, 1, 1, 1, 1, 1, 1], [86_400 * 17, 86_400 * 13], [3, 0, 7]]) {
      const parts = split(minor, ratios);
      if (parts.reduce((a, b) => a + b, 0) !== minor) off.push(`${minor} over ${ratios}: ${parts} do not add up`);
      const total = ratios.reduce((a, b) => a + b, 0);
      parts.forEach((part, i) => {
        if (Math.abs(part - (minor * ratios[i]!) / total) >= 1) off.push(`${minor} over ${ratios}: part ${i} = ${part}`);
      });
    }
  }
  t.same(off, [], 'the parts add up, each within one unit of its exact share');
  t.throws(() => split(10, []), MoneyError);
  t.throws(() => split(10, [0, 0]), MoneyError);
  t.throws(() => split(10, [1, -1]), MoneyError);
});

t.test('sumMinor adds exactly and refuses sums beyond the safe range', async (t) => {
  t.equal(sumMinor([999, 1, 1000]), 2000);
  t.equal(sumMinor([]), 0);
  t.throws(() => sumMinor([Number.MAX_SAFE_INTEGER, 1]), MoneyError);
});
