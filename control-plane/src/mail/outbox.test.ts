import t from 'tap';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { extractLinks, findLatestMessage, OUTBOX_LINKS_FILE, readOutbox, readRawMessage, waitForMessage, writeOutboxMessage } from './outbox.ts';

const tempDir = async (t: { teardown(fn: () => unknown): void }) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'outbox-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return path.join(dir, 'outbox');
};

const write = (dir: string, to: string, subject: string, text: string, at?: Date) =>
  writeOutboxMessage(dir, Buffer.from(`To: ${to}\nSubject: ${subject}\n\n${text}`), { messageId: `<${subject}@x>`, to, subject, text }, at);

t.test('extractLinks finds http(s) URLs without trailing punctuation', async (t) => {
  t.same(extractLinks('Go to https://a.test/x?token=1&b=2. Or (http://b.test/y), not ftp://c.test'), [
    'https://a.test/x?token=1&b=2',
    'http://b.test/y',
  ]);
  t.same(extractLinks('none here'), []);
});

t.test('an absent outbox is empty', async (t) => {
  t.same(await readOutbox(path.join(await tempDir(t), 'nope')), []);
});

t.test('messages are written as .eml plus sidecar and read back oldest first', async (t) => {
  const dir = await tempDir(t);
  const a = await write(dir, 'ann@example.test', 'First', 'Link: https://x.test/verify-email?token=T1');
  const b = await write(dir, 'bob@example.test', 'Second', 'no links');
  const c = await write(dir, 'Ann@Example.test', 'Third', 'https://x.test/reset-password?token=T2');
  const files = (await readdir(dir)).sort();
  t.equal(files.length, 7, 'an .eml and a sidecar per message, and links.txt');
  t.notOk(files.some((f) => f.endsWith('.tmp')));
  t.equal((await stat(dir)).mode & 0o777, 0o700);
  t.equal((await stat(path.join(dir, a.eml))).mode & 0o777, 0o600);

  const all = await readOutbox(dir);
  t.same(all.map((e) => e.subject), ['First', 'Second', 'Third']);
  t.same(all[0], a);
  t.same(a.links, ['https://x.test/verify-email?token=T1']);
  t.match(a.created_at, /^\d{4}-\d\d-\d\dT/);
  t.match(await readRawMessage(dir, b), /^To: bob@example.test\nSubject: Second/);

  t.equal((await findLatestMessage(dir, { to: 'ann@example.test' }))?.id, c.id, 'address match ignores case');
  t.equal((await findLatestMessage(dir, { to: 'ann@example.test', subject: 'First' }))?.id, a.id);
  t.equal((await findLatestMessage(dir, { to: 'ann@example.test', subject: /^Fir/ }))?.id, a.id);
  t.equal(await findLatestMessage(dir, { to: 'carl@example.test' }), undefined);
});

t.test('links.txt keeps a plain-text copy of each message\'s links, appended in write order', async (t) => {
  const dir = await tempDir(t);
  const a = await write(dir, 'ann@example.test', 'Confirm your e-mail address', 'Open https://x.test/verify-email?token=T1.\nOr https://x.test/help');
  const b = await write(dir, 'bob@example.test', 'Welcome', 'no links');
  const c = await write(dir, 'ann@example.test', 'Reset your password', 'https://x.test/reset-password?token=T2');
  const file = path.join(dir, OUTBOX_LINKS_FILE);
  t.equal((await stat(file)).mode & 0o777, 0o600, 'the links carry live tokens: private like the messages');
  t.equal(await readFile(file, 'utf8'), [
    `${a.created_at}  to ann@example.test  "Confirm your e-mail address"  (${a.eml})`,
    'https://x.test/verify-email?token=T1',
    'https://x.test/help',
    '',
    `${b.created_at}  to bob@example.test  "Welcome"  (${b.eml})`,
    '(no links)',
    '',
    `${c.created_at}  to ann@example.test  "Reset your password"  (${c.eml})`,
    'https://x.test/reset-password?token=T2',
    '',
  ].join('\n'), 'blank lines only between blocks: the file ends on the newest link');
  t.same((await readOutbox(dir)).map((e) => e.subject), ['Confirm your e-mail address', 'Welcome', 'Reset your password'], 'the messages read as before');
});

t.test('ordering holds within one millisecond', async (t) => {
  const dir = await tempDir(t);
  const at = new Date('2030-01-01T00:00:00Z');
  for (let i = 0; i < 20; i++) await write(dir, 'a@x.test', `m${i}`, '', at);
  t.same((await readOutbox(dir)).map((e) => e.subject), Array.from({ length: 20 }, (_, i) => `m${i}`));
  t.equal((await findLatestMessage(dir, { to: 'a@x.test' }))?.subject, 'm19');
});

t.test('waitForMessage sees a message written later, and times out otherwise', async (t) => {
  const dir = await tempDir(t);
  const since = new Date();
  setTimeout(() => void write(dir, 'late@x.test', 'Late', 'https://x.test/a'), 50);
  const got = await waitForMessage(dir, { to: 'late@x.test', since }, { timeoutMs: 2000 });
  t.equal(got.subject, 'Late');
  await t.rejects(waitForMessage(dir, { to: 'never@x.test' }, { timeoutMs: 100 }), /no message to never@x.test/);
  await t.rejects(
    waitForMessage(dir, { to: 'late@x.test', since: new Date(Date.now() + 60_000) }, { timeoutMs: 100 }),
    /no message/,
    'older messages do not count',
  );
});
