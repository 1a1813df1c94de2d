import t from 'tap';
import argon2 from 'argon2';
import {
  passwordSchema,
  newPasswordSchema,
  loginPasswordSchema,
  hashPassword,
  verifyPassword,
  needsRehash,
  dummyVerify,
  verifyPasswordOrDummy,
  warmUpPasswordHashing,
  PASSWORD_HASH_PARAMS,
  OWASP_MINIMUM_PARAMS,
} from './password.ts';

const messages = (value: unknown) => {
  const r = passwordSchema.safeParse(value);
  return r.success ? [] : r.error.issues.map((i) => i.message);
};

t.test('policy accepts a compliant password and reports each missing class precisely', async (t) => {
  t.same(messages('Correct-Horse-9'), []);
  t.same(messages('Ab1!Ab1!Ab'), [], 'exactly 10 characters is enough');
  t.same(messages('Ab1!Ab1!A'), ['Password must be at least 10 characters long']);
  t.same(messages('correct-horse-9'), ['Password must contain at least one uppercase letter']);
  t.same(messages('CORRECT-HORSE-9'), ['Password must contain at least one lowercase letter']);
  t.same(messages('Correct-Horse-X'), ['Password must contain at least one digit']);
  t.same(messages('CorrectHorse99'), ['Password must contain at least one special character']);
  t.same(messages('Correct Horse 9'), [], 'a space counts as a special character');
  t.same(messages('Correct-Horse-9\u0000'), ['Password must not contain control characters']);
  t.same(messages('abc'), [
    'Password must be at least 10 characters long',
    'Password must contain at least one uppercase letter',
    'Password must contain at least one digit',
    'Password must contain at least one special character',
  ]);
  t.same(messages(42), ['Password must be a string']);
});

t.test('length is bounded 10..128 in code points', async (t) => {
  const base = 'Aa1!';
  t.same(messages(base + 'x'.repeat(124)), [], '128 is allowed');
  t.same(messages(base + 'x'.repeat(125)), ['Password must be at most 128 characters long']);
  // 9 ASCII + one astral emoji = 11 UTF-16 units but 10 characters.
  t.same(messages('Aa1!aaaaa\u{1F600}'), []);
  t.same(messages('Aa1!aaaa\u{1F600}'), ['Password must be at least 10 characters long']);
  // 127 + emoji = 128 code points (129 UTF-16 units) is still allowed.
  t.same(messages(base + 'x'.repeat(123) + '\u{1F600}'), []);
});

t.test('newPasswordSchema applies the same policy; login schema does not', async (t) => {
  t.equal(newPasswordSchema.safeParse('weak').success, false);
  t.equal(newPasswordSchema.safeParse('Correct-Horse-9').success, true);
  t.equal(loginPasswordSchema.safeParse('weak').success, true, 'old passwords must still log in');
  t.equal(loginPasswordSchema.safeParse('').success, false);
  t.equal(loginPasswordSchema.safeParse('x'.repeat(1025)).success, false);
});

t.test('hash and verify with argon2id at the configured parameters', async (t) => {
  const start = performance.now();
  const hash = await hashPassword('Correct-Horse-9');
  const ms = performance.now() - start;
  t.comment(`argon2id m=${PASSWORD_HASH_PARAMS.memoryCost} t=${PASSWORD_HASH_PARAMS.timeCost} p=${PASSWORD_HASH_PARAMS.parallelism}: ${ms.toFixed(0)} ms`);
  t.match(hash, /^\$argon2id\$v=19\$/);
  // argon2 0.45 orders the PHC parameters m,p,t; compare them as a set.
  const params = Object.fromEntries(hash.split('$')[3]!.split(',').map((kv) => kv.split('=')));
  t.same(params, { m: '65536', t: '3', p: '4' });
  t.equal(await verifyPassword(hash, 'Correct-Horse-9'), true);
  t.equal(await verifyPassword(hash, 'Correct-Horse-8'), false);
  t.not(await hashPassword('Correct-Horse-9'), hash, 'salted: same password, different hash');
  t.equal(needsRehash(hash), false);
});

t.test('passwords are NFC-normalised so composed and decomposed forms match', async (t) => {
  const composed = 'Caf\u00e9-Horse-9';
  const decomposed = 'Cafe\u0301-Horse-9';
  t.not(composed, decomposed);
  const hash = await hashPassword(composed, OWASP_MINIMUM_PARAMS);
  t.equal(await verifyPassword(hash, decomposed), true);
});

t.test('malformed hashes are a mismatch, not an exception', async (t) => {
  t.equal(await verifyPassword('', 'x'), false);
  t.equal(await verifyPassword('$2b$10$abcdefghijklmnopqrstuv', 'x'), false);
  t.equal(await verifyPassword('$argon2id$garbage', 'x'), false);
});

t.test('needsRehash flags other parameters and other algorithms', async (t) => {
  const weaker = await hashPassword('Correct-Horse-9', OWASP_MINIMUM_PARAMS);
  t.equal(needsRehash(weaker), true);
  t.equal(needsRehash(weaker, OWASP_MINIMUM_PARAMS), false);
  const argon2i = await argon2.hash('x', { type: argon2.argon2i, memoryCost: 65536, timeCost: 3, parallelism: 4 });
  t.equal(needsRehash(argon2i), true, 'argon2i is replaced by argon2id');
  t.equal(needsRehash('$2b$10$abcdefghijklmnopqrstuv'), true);
});

t.test('parameters below the OWASP minimum are refused', async (t) => {
  await t.rejects(hashPassword('x', { memoryCost: 4096, timeCost: 3, parallelism: 1 }), /OWASP/);
  await t.rejects(hashPassword('x', { memoryCost: 19456, timeCost: 1, parallelism: 1 }), /OWASP/);
});

// No elapsed-time ratio here (timing on a shared, loaded machine belongs in
// bench/): the dummy path must run a real argon2id verification at the
// configured parameters, which is what makes it cost what a real one does.
t.test('dummy verify runs a real argon2id verification at the configured parameters and is always false', async (t) => {
  await warmUpPasswordHashing();
  const verified: string[] = [];
  const verify = argon2.verify;
  argon2.verify = async (...args: Parameters<typeof argon2.verify>) => {
    verified.push(args[0]);
    return verify(...args);
  };
  t.teardown(() => { argon2.verify = verify; });
  t.equal(await dummyVerify('Correct-Horse-9'), false);
  t.equal(await verifyPasswordOrDummy(undefined, 'anything'), false);
  t.equal(await verifyPasswordOrDummy(null, 'anything'), false);
  t.equal(await verifyPasswordOrDummy('', 'anything'), false);
  t.equal(verified.length, 4, 'each call verified against a hash');
  for (const hash of verified) {
    t.match(hash, /^\$argon2id\$v=19\$/);
    const params = Object.fromEntries(hash.split('$')[3]!.split(',').map((kv) => kv.split('=')));
    t.same(params, { m: String(PASSWORD_HASH_PARAMS.memoryCost), t: String(PASSWORD_HASH_PARAMS.timeCost), p: String(PASSWORD_HASH_PARAMS.parallelism) }, 'at the configured parameters');
  }
  const hash = await hashPassword('Correct-Horse-9');
  t.equal(await verifyPasswordOrDummy(hash, 'Correct-Horse-9'), true, 'a real hash still verifies');
});
