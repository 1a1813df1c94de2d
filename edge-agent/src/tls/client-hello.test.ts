import t from 'tap';
import { createServer, type AddressInfo } from 'node:net';
import { connect } from 'node:tls';
import { readClientHello } from './client-hello.ts';

/** The bytes a real TLS client sends first (Node's own, with or without SNI). */
async function clientHello(servername: string | null): Promise<Buffer> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const first = new Promise<Buffer>((resolve) => server.once('connection', (s) => {
    let data = Buffer.alloc(0);
    s.on('data', (c: Buffer) => {
      data = Buffer.concat([data, c]);
      if (readClientHello(data).state !== 'more') {
        resolve(data);
        s.destroy();
      }
    });
  }));
  const client = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, ...(servername ? { servername } : {}), rejectUnauthorized: false });
  client.on('error', () => {});
  const bytes = await first;
  client.destroy();
  server.close();
  return bytes;
}

/** The same handshake message cut into records of at most `size` bytes. */
function refragment(hello: Buffer, size: number): Buffer {
  const message = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const out: Buffer[] = [];
  for (let at = 0; at < message.length; at += size) {
    const part = message.subarray(at, Math.min(message.length, at + size));
    const head = Buffer.from([22, 3, 1, 0, 0]);
    head.writeUInt16BE(part.length, 3);
    out.push(head, part);
  }
  return Buffer.concat(out);
}

t.test('the server name of a real ClientHello, lower-cased', async (t) => {
  const hello = await clientHello('Shop.Example.ORG');
  t.same(readClientHello(hello), { state: 'done', servername: 'shop.example.org' });
  t.same(readClientHello(await clientHello(null)), { state: 'done', servername: null }, 'no SNI: null');
});

t.test('every shorter prefix needs more bytes; the name is read once the message is whole, across records too', async (t) => {
  const hello = await clientHello('media.example.org');
  let more = 0;
  for (let n = 0; n < hello.length; n++) if (readClientHello(hello.subarray(0, n)).state === 'more') more++;
  t.equal(more, hello.length, 'every prefix: more');
  const split = refragment(hello, 100);
  t.ok(split.length > hello.length, 'several records');
  t.same(readClientHello(split), { state: 'done', servername: 'media.example.org' }, 'a ClientHello split across records');
  for (let n = 0; n < split.length; n++) if (readClientHello(split.subarray(0, n)).state !== 'more') t.fail(`prefix ${n} of the split hello`);
});

t.test('what is not a TLS handshake is said at once', async (t) => {
  t.same(readClientHello(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')), { state: 'not-tls' }, 'plain HTTP on the TLS port');
  t.same(readClientHello(Buffer.from([22, 3, 1, 0, 5, 2, 0, 0, 1, 0])), { state: 'not-tls' }, 'a handshake that is not a ClientHello');
  t.same(readClientHello(Buffer.from([22, 2])), { state: 'not-tls' }, 'not record version 3');
  t.same(readClientHello(Buffer.from([22])), { state: 'more' });
});

t.test('a server name that is not a host name counts as none', async (t) => {
  const hello = await clientHello('good.example.org');
  const text = hello.toString('latin1');
  const at = text.indexOf('good.example.org');
  const bad = Buffer.from(hello);
  bad.write('bad_example/org!', at, 'latin1');
  t.same(readClientHello(bad), { state: 'done', servername: null });
});
