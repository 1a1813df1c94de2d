// Regression: slow uploads starved the origin pool. 260 connections each sending
// POST with Content-Length: 100000 one byte at a time held all 256 undici
// connections to the origin (the listener had requestTimeout: 0), so every
// uncached GET to that origin timed out for as long as the trickle lasted.
// Uploads now have their own, smaller connection budget per origin, the
// listener bounds how long a request may take to arrive, and a forwarded
// upload whose body stalls is cut after the body-idle timeout.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { request } from 'undici';
import { HOST, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const ATTACKERS = 260;
const UPLOAD_CONNECTIONS = 8;

t.test('trickling uploads cannot starve cache misses to the same origin', { timeout: 60_000 }, async (t) => {
  let uploading = 0;
  let maxUploading = 0;
  /** How many uploads the agent had cut when each miss reached the origin. */
  let uploadsCut = 0;
  const uploadsCutAtMiss: number[] = [];
  const origin = await startOrigin((req, res) => {
    if (req.method === 'POST') {
      uploading++;
      maxUploading = Math.max(maxUploading, uploading);
      let done = false;
      const finish = () => {
        if (!done) uploading--;
        done = true;
      };
      req.on('close', () => {
        if (!req.complete) uploadsCut++;
        finish();
      });
      req.on('error', () => {}); // the agent cuts uploads: "aborted"
      req.resume();
      req.on('end', () => {
        res.end('stored');
        finish();
      });
      return;
    }
    uploadsCutAtMiss.push(uploadsCut);
    res.writeHead(200, { 'cache-control': 'no-store' });
    res.end(`fresh ${req.url}`);
  });
  const edge = await startAgent(snapshotFor(origin.port), {
    uploadConnectionsPerOrigin: UPLOAD_CONNECTIONS,
    // Small limits so the attack is cut within the test: every trickling request must have arrived within 3 s.
    requestTimeoutMs: 3000,
    requestHeadersTimeoutMs: 2000,
    requestBodyIdleTimeoutMs: 2000,
  });
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const sockets: Socket[] = [];
  const closed: Promise<string>[] = [];
  for (let i = 0; i < ATTACKERS; i++) {
    const s = connect(edge.port, '127.0.0.1');
    s.on('error', () => {});
    let answer = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (answer += c));
    closed.push(new Promise((resolve) => s.on('close', () => resolve(answer))));
    s.write(`POST /upload/${i} HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\nx`);
    sockets.push(s);
  }
  // One byte per connection every 300 ms: never idle long enough for an idle timeout, never finished.
  const trickle = setInterval(() => { for (const s of sockets) if (!s.destroyed) s.write('x'); }, 300);
  t.teardown(() => {
    clearInterval(trickle);
    for (const s of sockets) s.destroy();
  });
  await origin.received(undefined, UPLOAD_CONNECTIONS);

  // While the uploads trickle, misses from other viewers reach the origin beside them: each miss arrives before the
  // agent has cut any upload (a starved pool lets a miss through only once uploads are cut, at 3 s).
  // No time bound: on a loaded 2-core host the first miss beside 260 trickling sockets took 0.7–2.6 s.
  const t0 = performance.now();
  const misses = await Promise.all(Array.from({ length: 5 }, async (_, i) => {
    // The client gives up after 5 s so that a starved agent fails the test rather than hanging it.
    const res = await request(`http://127.0.0.1:${edge.port}/page-${i}`, { headers: { host: HOST }, headersTimeout: 5000, bodyTimeout: 5000 });
    return { status: res.statusCode, body: await res.body.text() };
  }));
  t.comment(`5 misses answered in ${(performance.now() - t0).toFixed(0)} ms`);
  misses.forEach((m, i) => {
    t.equal(m.status, 200, `miss ${i} answered`);
    t.equal(m.body, `fresh /page-${i}`);
  });
  t.same(uploadsCutAtMiss, [0, 0, 0, 0, 0], 'every miss reached the origin while the uploads still held their connections, none cut yet');
  t.equal(maxUploading, UPLOAD_CONNECTIONS, 'the uploads held their whole budget meanwhile');
  t.ok(maxUploading <= UPLOAD_CONNECTIONS, `at most ${UPLOAD_CONNECTIONS} uploads held origin connections (saw ${maxUploading})`);

  // The listener's request timeout ends every trickling request: the attack does not last.
  const answers = await Promise.all(closed);
  clearInterval(trickle);
  t.ok(answers.every((a) => a === '' || /^HTTP\/1\.1 (408|504|502)/.test(a)), 'each trickling request was cut (408, or closed)');
  t.ok(answers.filter((a) => a.startsWith('HTTP/1.1 408')).length > 0, 'viewers whose upload never completed were told 408');

  // A normal upload goes through once the trickles are gone.
  const ok = await request(`http://127.0.0.1:${edge.port}/upload/ok`, { method: 'POST', headers: { host: HOST }, body: 'x'.repeat(1000) });
  t.equal(ok.statusCode, 200);
  t.equal(await ok.body.text(), 'stored');
});

t.test('a forwarded upload whose body stalls is cut after the body-idle timeout', { timeout: 30_000 }, async (t) => {
  let originClosed!: (complete: boolean) => void;
  const originRequestEnded = new Promise<boolean>((resolve) => (originClosed = resolve));
  const origin = await startOrigin((req, res) => {
    req.resume();
    req.on('error', () => {}); // "aborted", expected
    req.on('close', () => originClosed(req.complete));
    req.on('end', () => res.end('stored'));
  });
  const edge = await startAgent(snapshotFor(origin.port), { requestBodyIdleTimeoutMs: 500, requestTimeoutMs: 60_000 });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const s = connect(edge.port, '127.0.0.1');
  s.on('error', () => {});
  let answer = '';
  s.setEncoding('latin1');
  s.on('data', (c: string) => (answer += c));
  const closed = new Promise<void>((resolve) => s.on('close', () => resolve()));
  s.write(`POST /stall HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 1000\r\n\r\n0123456789`);
  t.teardown(() => s.destroy());
  await closed;
  t.match(answer, /^HTTP\/1\.1 408 /, 'the viewer is told its request timed out');
  t.match(answer, /\r\nconnection: close\r\n/i, 'and the connection is closed');
  t.equal(origin.count('/stall'), 1, 'the request had been forwarded');
  t.equal(await originRequestEnded, false, 'the origin request was aborted rather than left waiting for the rest of the body');
});
