// TLS session resumption by tickets across the workers of a node and across a
// key rotation: agents given the same ticket keys (as the primary gives its
// workers) resume each other's sessions, whichever takes the connection; after
// the keys are rotated (WorkerPool.rotateTicketKeys sends every worker the new
// ones) a ticket issued under the old keys no longer resumes (a full
// handshake) and a new ticket resumes at every worker again. Real agents, real
// TLS 1.3 handshakes from node:tls clients.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:tls';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { DefaultCertificate } from '../src/tls/certificates.ts';
import { HOST, startAgent, startOrigin, snapshotFor } from './helpers.ts';

const ca = await makeCa('Session Tickets CA');
const leaf = await makeLeaf(ca, [HOST]);
const origin = await startOrigin((_req, res) => res.writeHead(200, { 'cache-control': 'max-age=60' }).end('ok'));
t.teardown(() => origin.close());

const keys = randomBytes(48);
const workers = await Promise.all([0, 1].map(async () => {
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(() => edge.close());
  edge.agent.setDefaultCertificate(new DefaultCertificate({ certPem: leaf.certPem + ca.pem, keyPem: leaf.keyPem }));
  const { port } = await edge.agent.listenHttps(0, '127.0.0.1', { ticketKeys: keys });
  return { agent: edge.agent, port };
}));

/** A full handshake: the session ticket it was given. */
function ticketFrom(port: number): Promise<{ reused: boolean; ticket: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername: HOST, ca: ca.pem, minVersion: 'TLSv1.3', ALPNProtocols: ['http/1.1'] });
    socket.once('session', (ticket: Buffer) => {
      resolve({ reused: socket.isSessionReused(), ticket });
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

/** A handshake offering the ticket: whether the session was resumed. */
function resumes(port: number, session: Buffer): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername: HOST, ca: ca.pem, minVersion: 'TLSv1.3', ALPNProtocols: ['http/1.1'], session });
    socket.once('secureConnect', () => {
      resolve(socket.isSessionReused());
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

t.test('a ticket from one worker resumes at the other; after a rotation old tickets make a full handshake, new ones resume everywhere', async (t) => {
  const [a, b] = workers as [typeof workers[0], typeof workers[0]];
  const first = await ticketFrom(a.port);
  t.equal(first.reused, false, 'the first handshake is full');
  t.equal(await resumes(b.port, first.ticket), true, 'worker 1 resumes the session worker 0 issued (shared keys)');
  const rotated = randomBytes(48);
  for (const w of workers) w.agent.setTicketKeys(rotated);
  t.equal(await resumes(a.port, first.ticket), false, 'a ticket issued under the old keys no longer resumes');
  const fresh = await ticketFrom(b.port);
  t.equal(await resumes(a.port, fresh.ticket), true, 'a ticket issued under the new keys resumes at the other worker');
});
