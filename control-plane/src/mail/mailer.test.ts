import t from 'tap';
import net from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Mailer, createMailer, type MailLogger } from './mailer.ts';
import { findLatestMessage, readOutbox, readRawMessage } from './outbox.ts';
import { passwordResetEmail } from './templates.ts';

const tempDir = async (t: { teardown(fn: () => unknown): void }) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'mailer-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
};

function recordingLogger() {
  const lines: string[] = [];
  const logger: MailLogger = {
    info: (obj, msg) => void lines.push(JSON.stringify({ ...obj, msg })),
    error: (obj, msg) => void lines.push(JSON.stringify({ ...obj, msg })),
  };
  return { logger, lines };
}

const from = '"Streaming Platform" <no-reply@example.test>';
const token = 'secret-token-value-XYZ';

t.test('without SMTP, messages land in DATA_DIR/outbox with a sidecar', async (t) => {
  const dataDir = await tempDir(t);
  const { logger, lines } = recordingLogger();
  const mailer = createMailer({ dataDir, from, logger });
  t.equal(mailer.transport, 'outbox');
  const content = passwordResetEmail({ publicUrl: 'https://watch.example.test', token });
  const { messageId } = await mailer.send({ to: 'ann@example.test', ...content });
  t.match(messageId, /^<.+@.+>$/);

  const outbox = path.join(dataDir, 'outbox');
  const entry = await findLatestMessage(outbox, { to: 'ann@example.test', subject: /Reset/ });
  t.ok(entry);
  t.equal(entry!.message_id, messageId);
  t.equal(new URL(entry!.links[0]!).searchParams.get('token'), token);
  const raw = await readRawMessage(outbox, entry!);
  t.match(raw, /^From: "?Streaming Platform"? <no-reply@example\.test>$/m);
  t.match(raw, /^To: ann@example\.test$/m);
  t.match(raw, /Content-Type: multipart\/alternative/, 'text and HTML parts');
  t.match(raw, /Content-Type: text\/html/);

  t.equal(lines.length, 1);
  t.notMatch(lines[0]!, token, 'no token in logs');
  t.notMatch(lines[0]!, 'ann@', 'no full address in logs');
  t.match(JSON.parse(lines[0]!), { transport: 'outbox', to_domain: 'example.test', message_id: messageId });
});

t.test('header injection and bad recipients are refused', async (t) => {
  const mailer = new Mailer({ from, outboxDir: path.join(await tempDir(t), 'outbox') });
  await t.rejects(mailer.send({ to: 'a@x.test\nBcc: b@y.test', subject: 's', text: 't' }), /invalid recipient/);
  await t.rejects(mailer.send({ to: 'a@x.test, b@y.test', subject: 's', text: 't' }), /invalid recipient/);
  await t.rejects(mailer.send({ to: 'not-an-address', subject: 's', text: 't' }), /invalid recipient/);
  await t.rejects(mailer.send({ to: 'a@x.test', subject: 's\r\nBcc: b@y.test', text: 't' }), /single line/);
  t.same(await readOutbox(mailer.outboxDir!), [], 'nothing written');
  t.throws(() => new Mailer({ from }), /outboxDir is required/);
  t.throws(() => new Mailer({ from, smtpUrl: 'http://mail.test' }), /smtp/);
});

/** Just enough SMTP (RFC 5321) to accept messages: records each DATA section. */
async function fakeSmtpServer(t: { teardown(fn: () => unknown): void }, opts: { rejectRcpt?: boolean } = {}) {
  const received: { from: string; to: string[]; data: string }[] = [];
  const server = net.createServer((socket) => {
    socket.setEncoding('utf8');
    let buffer = '';
    let inData = false;
    let current = { from: '', to: [] as string[], data: '' };
    socket.write('220 fake ESMTP\r\n');
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      for (;;) {
        if (inData) {
          const end = buffer.indexOf('\r\n.\r\n');
          if (end === -1) return;
          current.data = buffer.slice(0, end);
          buffer = buffer.slice(end + 5);
          inData = false;
          received.push(current);
          current = { from: '', to: [], data: '' };
          socket.write('250 2.0.0 queued\r\n');
          continue;
        }
        const nl = buffer.indexOf('\r\n');
        if (nl === -1) return;
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') socket.write('250-fake\r\n250 8BITMIME\r\n');
        else if (verb === 'MAIL') (current.from = line), socket.write('250 OK\r\n');
        else if (verb === 'RCPT') {
          if (opts.rejectRcpt) socket.write('550 5.1.1 no such user\r\n');
          else current.to.push(line), socket.write('250 OK\r\n');
        } else if (verb === 'DATA') (inData = true), socket.write('354 go ahead\r\n');
        else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 OK\r\n');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address() as net.AddressInfo;
  return { url: `smtp://127.0.0.1:${port}`, received };
}

t.test('with an SMTP URL, messages go over SMTP and not to the outbox', async (t) => {
  const dataDir = await tempDir(t);
  const smtp = await fakeSmtpServer(t);
  const { logger, lines } = recordingLogger();
  const mailer = createMailer({ dataDir, from, logger, smtpUrl: smtp.url });
  t.teardown(() => mailer.close());
  t.equal(mailer.transport, 'smtp');
  const content = passwordResetEmail({ publicUrl: 'https://watch.example.test', token });
  const { messageId } = await mailer.send({ to: 'bob@example.test', ...content });
  t.equal(smtp.received.length, 1);
  t.match(smtp.received[0]!.from, /MAIL FROM:<no-reply@example\.test>/);
  t.match(smtp.received[0]!.to[0], /RCPT TO:<bob@example\.test>/);
  t.match(smtp.received[0]!.data, /^Subject: Reset your Streaming Platform password$/m);
  t.match(smtp.received[0]!.data, messageId);
  t.same(await readOutbox(path.join(dataDir, 'outbox')), [], 'outbox untouched');
  t.notMatch(lines.join('\n'), token);
});

t.test('SMTP failures reject and log only an error code', async (t) => {
  const smtp = await fakeSmtpServer(t, { rejectRcpt: true });
  const { logger, lines } = recordingLogger();
  const mailer = new Mailer({ from, smtpUrl: smtp.url, logger });
  t.teardown(() => mailer.close());
  await t.rejects(mailer.send({ to: 'nobody@example.test', subject: 'Hi', text: `token ${token}` }));
  t.equal(lines.length, 1);
  t.match(JSON.parse(lines[0]!), { msg: 'mail send failed', transport: 'smtp', err_code: 'EENVELOPE' });
  t.notMatch(lines[0]!, token);
  t.notMatch(lines[0]!, 'no such user', 'server replies are not logged');
});
