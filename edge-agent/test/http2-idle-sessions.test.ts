// An HTTP/2 session the viewer keeps open without requests is closed once it
// has been idle for the idle time (GOAWAY, so nothing under way is cut), and
// one with a stream open is not closed under it: the HTTP/2 listener's own
// sweep (tls/http2-server.ts), here with a 100 ms idle time, fed by a real TLS
// server as the HTTPS listener feeds it.
import t from 'tap';
import http2 from 'node:http2';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { eventually } from '../../test/support/eventually.ts';
import { Http2Listener } from '../src/tls/http2-server.ts';

const ca = await makeCa('Idle Sessions CA');
const leaf = await makeLeaf(ca, ['idle.test']);
/** Requests to /slow are answered when released; the others at once. */
const slow: ServerResponse[] = [];
const listener = new Http2Listener((req: IncomingMessage, res: ServerResponse) => {
  if (req.url === '/slow') slow.push(res);
  else res.writeHead(200, ['content-type', 'text/plain']).end('ok');
}, 100);
const server = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem, ALPNProtocols: ['h2'] }, (socket) => listener.emit('connection', socket));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as AddressInfo).port;
t.teardown(async () => {
  await listener.close(100);
  server.close();
});

const connect = () => http2.connect(`https://127.0.0.1:${port}`, { servername: 'idle.test', ca: ca.pem });
const get = (session: http2.ClientHttp2Session, path: string) => new Promise<string>((resolve, reject) => {
  const req = session.request({ ':path': path, ':authority': 'idle.test' });
  let body = '';
  req.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve(body)).on('error', reject);
  req.end();
});

t.test('an idle HTTP/2 session is sent GOAWAY and closed', async (t) => {
  const session = connect();
  t.equal(await get(session, '/a'), 'ok');
  const code = await new Promise<number>((resolve) => session.once('goaway', (c: number) => resolve(c)));
  t.equal(code, http2.constants.NGHTTP2_NO_ERROR, 'a graceful GOAWAY');
  await new Promise<void>((resolve) => (session.closed ? resolve() : session.once('close', () => resolve())));
  await eventually(() => listener.sessionCount === 0, 'the server side of the session closed too');
});

t.test('a session with a stream under way is not idle: its answer arrives after several idle times', async (t) => {
  const session = connect();
  t.teardown(() => session.destroy());
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  const answer = get(session, '/slow');
  // Wait until the idle sweep has run well past the idle time with the stream open: an idle session closes first.
  const idle = connect();
  t.teardown(() => idle.destroy());
  await get(idle, '/b');
  await new Promise<void>((resolve) => idle.once('close', () => resolve()));
  t.equal(goaway, false, 'no GOAWAY while a stream is open');
  slow.shift()!.writeHead(200, ['content-type', 'text/plain']).end('late');
  t.equal(await answer, 'late');
});
