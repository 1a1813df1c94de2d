import t from 'tap';
import { withoutNul } from './nul-free.ts';

t.test('the test run\'s log stays text: a NUL byte is written as \\u0000, every other byte as it came', async (t) => {
  t.equal(withoutNul(Buffer.from('ok 1 - /a\u0000\n')).toString(), 'ok 1 - /a\\u0000\n');
  t.equal(withoutNul(Buffer.from('\u0000é\u0000\u0000ü')).toString(), '\\u0000é\\u0000\\u0000ü');
  const plain = Buffer.from('no NUL here: ✓');
  t.equal(withoutNul(plain), plain, 'a chunk without one is passed on untouched');
});
