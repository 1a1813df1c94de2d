import t from 'tap';
import { passwordSchema } from '../auth/index.ts';
import { generatePassword } from './create-admin.ts';

t.test('a generated password meets the policy and has nothing fixed: no common suffix, prefix or class position', async (t) => {
  const passwords = Array.from({ length: 200 }, generatePassword);
  for (const p of passwords) {
    if (!passwordSchema.safeParse(p).success) t.fail(`refused by the policy: ${p}`);
  }
  t.equal(new Set(passwords).size, 200, 'all different');
  t.ok(new Set(passwords.map((p) => p.slice(-4))).size > 150, 'the last four characters vary');
  t.ok(new Set(passwords.map((p) => p.slice(0, 4))).size > 150, 'the first four characters vary');
  t.ok(new Set(passwords.map((p) => p.search(/[0-9]/))).size > 5, 'the first digit stands anywhere');
  t.ok(new Set(passwords.map((p) => p.search(/[^A-Za-z0-9]/))).size > 5, 'the first symbol stands anywhere');
  t.ok(passwords.every((p) => p.length === 24 && /^[A-Za-z0-9\-_.~+=@#%]+$/.test(p)), 'no character a shell\'s single quotes or JSON would need escaped');
});
