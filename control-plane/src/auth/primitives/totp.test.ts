import t from 'tap';
import { generate } from 'otplib';
import { generateTotpSecret, otpauthUri, verifyTotp, type TotpAlgorithm } from './totp.ts';

const seeds: Record<TotpAlgorithm, Uint8Array> = {
  sha1: new TextEncoder().encode('12345678901234567890'),
  sha256: new TextEncoder().encode('12345678901234567890123456789012'),
  sha512: new TextEncoder().encode('1234567890123456789012345678901234567890123456789012345678901234'),
};

// RFC 6238 Appendix B: time -> [SHA1, SHA256, SHA512], 8 digits, 30 s steps.
const vectors: Array<[number, string, string, string]> = [
  [59, '94287082', '46119246', '90693936'],
  [1111111109, '07081804', '68084774', '25091201'],
  [1111111111, '14050471', '67062674', '99943326'],
  [1234567890, '89005924', '91819424', '93441116'],
  [2000000000, '69279037', '90698825', '38618901'],
  [20000000000, '65353130', '77737706', '47863826'],
];
const algorithms: TotpAlgorithm[] = ['sha1', 'sha256', 'sha512'];

t.test('otplib generation matches RFC 6238 Appendix B', async (t) => {
  for (const [time, ...codes] of vectors) {
    for (const [i, algorithm] of algorithms.entries()) {
      const code = await generate({ secret: seeds[algorithm], algorithm, digits: 8, period: 30, epoch: time });
      t.equal(code, codes[i], `${algorithm} at ${time}`);
    }
  }
});

t.test('verifyTotp accepts each RFC vector and returns its time step', async (t) => {
  for (const [time, ...codes] of vectors) {
    for (const [i, algorithm] of algorithms.entries()) {
      const match = await verifyTotp(seeds[algorithm], codes[i]!, { digits: 8, algorithm, now: time, window: 0 });
      t.same(match, { timeStep: Math.floor(time / 30), delta: 0 }, `${algorithm} at ${time}`);
    }
  }
  // The same code is wrong under another algorithm.
  t.equal(await verifyTotp(seeds.sha256, '94287082', { digits: 8, algorithm: 'sha256', now: 59 }), null);
});

t.test('window 1 accepts the previous and next step, not two away', async (t) => {
  const secret = generateTotpSecret();
  const now = 1_700_000_015; // middle of a step
  const step = Math.floor(now / 30);
  const codeAt = (s: number) => generate({ secret, epoch: s * 30 });
  t.same(await verifyTotp(secret, await codeAt(step), { now }), { timeStep: step, delta: 0 });
  t.same(await verifyTotp(secret, await codeAt(step - 1), { now }), { timeStep: step - 1, delta: -1 });
  t.same(await verifyTotp(secret, await codeAt(step + 1), { now }), { timeStep: step + 1, delta: 1 });
  t.equal(await verifyTotp(secret, await codeAt(step - 2), { now }), null);
  t.equal(await verifyTotp(secret, await codeAt(step + 2), { now }), null);
  t.equal(await verifyTotp(secret, await codeAt(step - 1), { now, window: 0 }), null, 'window 0 is exact');
});

t.test('afterTimeStep refuses a code already spent', async (t) => {
  const secret = generateTotpSecret();
  const now = 1_700_000_015;
  const step = Math.floor(now / 30);
  const code = await generate({ secret, epoch: now });
  const first = await verifyTotp(secret, code, { now });
  t.equal(first?.timeStep, step);
  t.equal(await verifyTotp(secret, code, { now, afterTimeStep: first!.timeStep }), null, 'same step again');
  t.equal(await verifyTotp(secret, code, { now, afterTimeStep: step + 5 }), null, 'beyond the window: refused, no throw');
  const next = await generate({ secret, epoch: now + 30 });
  t.same(await verifyTotp(secret, next, { now: now + 30, afterTimeStep: step }), { timeStep: step + 1, delta: 0 });
});

t.test('codes must have exactly the configured number of digits', async (t) => {
  const secret = generateTotpSecret();
  const now = 1_700_000_015;
  const six = await generate({ secret, epoch: now });
  const eight = await generate({ secret, epoch: now, digits: 8 });
  t.ok(await verifyTotp(secret, six, { now }));
  t.equal(await verifyTotp(secret, eight, { now }), null, '8 digits when 6 are configured');
  t.ok(await verifyTotp(secret, eight, { now, digits: 8 }));
  t.equal(await verifyTotp(secret, six, { now, digits: 8 }), null);
  for (const bad of ['', '12345', '12345a', ' 123456', '123 456', '１２３４５６']) {
    t.equal(await verifyTotp(secret, bad, { now }), null, JSON.stringify(bad));
  }
  await t.rejects(verifyTotp(secret, six, { digits: 9 }), RangeError);
  await t.rejects(verifyTotp(secret, six, { digits: 5 }), RangeError);
});

t.test('secret and otpauth URI', async (t) => {
  const secret = generateTotpSecret();
  t.match(secret, /^[A-Z2-7]{32}$/, '20 bytes of Base32');
  t.not(generateTotpSecret(), secret);
  const uri = new URL(otpauthUri({ secret, accountName: 'ann@example.com', issuer: 'Stream Co' }));
  t.equal(uri.protocol, 'otpauth:');
  t.equal(uri.host, 'totp');
  t.equal(decodeURIComponent(uri.pathname), '/Stream Co:ann@example.com');
  t.equal(uri.searchParams.get('secret'), secret);
  t.equal(uri.searchParams.get('issuer'), 'Stream Co');
  const eight = new URL(otpauthUri({ secret, accountName: 'a', issuer: 'b', digits: 8, algorithm: 'sha256' }));
  t.equal(eight.searchParams.get('digits'), '8');
  t.equal(eight.searchParams.get('algorithm'), 'SHA256');
});
