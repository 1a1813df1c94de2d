import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile, chmod } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  SecretBox,
  SecretBoxError,
  deriveKey,
  generateSecretsKey,
  loadOrCreateDevKey,
  loadSecretsKey,
  parseSecretsKey,
} from './secret-box.ts';

const tempDir = async (t: { teardown(fn: () => unknown): void }) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'secret-box-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
};

const key = randomBytes(32);

t.test('round trip with the compact versioned format', async (t) => {
  const box = new SecretBox(key);
  const sealed = box.seal('-----BEGIN PRIVATE KEY----- secret', 'signing_key:42');
  t.match(sealed, /^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]+$/);
  t.notMatch(sealed, /secret/);
  t.equal(box.openString(sealed, 'signing_key:42'), '-----BEGIN PRIVATE KEY----- secret');
  t.not(box.seal('same', 'a'), box.seal('same', 'a'), 'random IV: same input, different output');
  const bytes = randomBytes(100);
  t.same(box.open(box.seal(bytes)), bytes, 'bytes without AAD');
  t.equal(box.openString(box.seal('')), '', 'empty plaintext');
});

t.test('tampering with any part is detected', async (t) => {
  const box = new SecretBox(key);
  const sealed = box.seal('totp-secret-JBSWY3DPEHPK3PXP', 'user:1');
  const parts = sealed.split('.');
  for (const i of [1, 2, 3]) {
    const bytes = Buffer.from(parts[i]!, 'base64url');
    bytes[0]! ^= 1;
    const tampered = parts.map((p, j) => (j === i ? bytes.toString('base64url') : p)).join('.');
    t.throws(() => box.open(tampered, 'user:1'), new SecretBoxError('secret could not be decrypted'), `part ${i}`);
  }
  t.throws(() => box.open(sealed.slice(0, -2), 'user:1'), SecretBoxError, 'truncated ciphertext');
  t.throws(() => box.open('v2' + sealed.slice(2), 'user:1'), /not a sealed secret/, 'unknown version');
  t.throws(() => box.open('plain text', 'user:1'), /not a sealed secret/);
});

t.test('wrong AAD is refused: ciphertexts cannot move between records', async (t) => {
  const box = new SecretBox(key);
  const sealed = box.seal('origin-header-value', 'origin:1');
  t.throws(() => box.open(sealed, 'origin:2'), SecretBoxError);
  t.throws(() => box.open(sealed), SecretBoxError, 'missing AAD');
  t.throws(() => box.open(box.seal('x'), 'origin:1'), SecretBoxError, 'AAD where none was used');
});

t.test('wrong key is refused; previous keys open during rotation', async (t) => {
  const oldBox = new SecretBox(key);
  const sealed = oldBox.seal('s', 'r');
  const newKey = randomBytes(32);
  t.throws(() => new SecretBox(newKey).open(sealed, 'r'), SecretBoxError);
  const rotating = new SecretBox(newKey, [key]);
  t.equal(rotating.openString(sealed, 'r'), 's');
  t.equal(rotating.needsReseal(sealed, 'r'), true);
  const resealed = rotating.seal(rotating.open(sealed, 'r'), 'r');
  t.equal(rotating.needsReseal(resealed, 'r'), false);
  t.throws(() => oldBox.open(resealed, 'r'), SecretBoxError, 'old key cannot open new ciphertexts');
  t.throws(() => new SecretBox(randomBytes(16)), /32 bytes/);
});

t.test('SECRETS_KEY parsing accepts hex and base64 of exactly 32 bytes', async (t) => {
  t.same(parseSecretsKey(key.toString('hex')), key);
  t.same(parseSecretsKey(key.toString('base64')), key);
  t.same(parseSecretsKey(key.toString('base64url')), key);
  t.same(parseSecretsKey(` ${key.toString('base64')}\n`), key, 'whitespace from files and env is trimmed');
  t.equal(parseSecretsKey(generateSecretsKey()).length, 32);
  for (const bad of ['', 'changeme', randomBytes(16).toString('hex'), randomBytes(31).toString('base64'), randomBytes(33).toString('hex'), 'g'.repeat(64)]) {
    t.throws(() => parseSecretsKey(bad), SecretBoxError, JSON.stringify(bad));
  }
  t.throws(() => parseSecretsKey('0'.repeat(64)), /random/);
});

t.test('deriveKey gives distinct, stable subkeys per purpose', async (t) => {
  const a = deriveKey(key, 'token-pepper');
  t.equal(a.length, 32);
  t.same(deriveKey(key, 'token-pepper'), a);
  t.notSame(deriveKey(key, 'download-links'), a);
  t.notSame(deriveKey(randomBytes(32), 'token-pepper'), a);
  t.notSame(a, key);
  t.throws(() => deriveKey(randomBytes(16), 'x'), SecretBoxError);
});

t.test('loadOrCreateDevKey creates a 0600 key once and reuses it', async (t) => {
  const dir = path.join(await tempDir(t), 'data');
  const first = await loadOrCreateDevKey(dir);
  t.equal(first.length, 32);
  const file = path.join(dir, 'secrets.key');
  t.equal((await stat(file)).mode & 0o777, 0o600);
  t.same(await loadOrCreateDevKey(dir), first, 'same key on restart');
  t.same(parseSecretsKey(await readFile(file, 'utf8')), first);

  const [x, y] = await Promise.all([loadOrCreateDevKey(path.join(dir, 'race')), loadOrCreateDevKey(path.join(dir, 'race'))]);
  t.same(x, y, 'concurrent starts agree on one key');

  await chmod(file, 0o644);
  await loadOrCreateDevKey(dir);
  t.equal((await stat(file)).mode & 0o777, 0o600, 'looser permissions are tightened');

  await writeFile(file, 'garbage');
  await t.rejects(loadOrCreateDevKey(dir), SecretBoxError, 'a corrupt key file is an error, not silently replaced');
});

t.test('loadSecretsKey: env first, dev file otherwise, never a generated key in production', async (t) => {
  const dir = await tempDir(t);
  t.same(await loadSecretsKey({ secretsKey: key.toString('hex'), dataDir: dir, production: true }), key);
  await t.rejects(loadSecretsKey({ secretsKey: undefined, dataDir: dir, production: true }), /required in production/);
  await t.rejects(loadSecretsKey({ secretsKey: 'short', dataDir: dir, production: false }), SecretBoxError);
  const dev = await loadSecretsKey({ secretsKey: '', dataDir: dir, production: false });
  t.same(dev, await loadOrCreateDevKey(dir));
});
