// The HTTPS listener of a real agent process (issue 23 item 1), configured
// from a snapshot file: the certificate by SNI (custom domains with their own,
// CDN hostnames with the default wildcard certificate from TLS_CERT_FILE, no
// SNI the default one, an unknown name a failed handshake), each endpoint's
// minimum TLS version and cipher policy applied per name, HTTP/2 by ALPN only
// for names whose endpoint's http_version allows it, a request for a
// name the connection was not made for answered 421, and redirects to HTTPS
// naming the agent's HTTPS port.
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import http2 from 'node:http2';
import { connect as netConnect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { makeCa, makeLeaf, makeLeafOfKeyType } from '../../test/support/certificates.ts';
import { startAgentProcess, startOrigin } from './helpers.ts';
import { handshakeError, tlsConnect } from './tls-client.ts';

const dir = mkdtempSync(join(tmpdir(), 'edge-tls-sni-'));
const ca = await makeCa('SNI Test CA');
const wildcard = await makeLeaf(ca, ['*.cdn.test']);
const shop = await makeLeaf(ca, ['shop.example.org']);
const media = await makeLeaf(ca, ['media.example.org']);
// A pair the edge cannot serve (shared/src/tls/servable.ts), as an older configuration may carry one.
const k1 = await makeLeafOfKeyType(ca, ['k1.example.org'], 'secp256k1');
writeFileSync(join(dir, 'cdn.pem'), wildcard.certPem + ca.pem);
writeFileSync(join(dir, 'cdn.key'), wildcard.keyPem, { mode: 0o600 });

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
  res.end(`origin ${req.url}`);
});
t.teardown(() => origin.close());

const endpoint = (id: string, hostname: string, tls: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  id, hostname, default_origin_id: `${id}-o`, tls_config: tls, http_version: 'http1.1',
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
  ...extra,
});
const snapshot = {
  version: 1,
  endpoints: [
    endpoint('strict', 'strict.cdn.test', { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'modern' }, {
      custom_domains: [
        { hostname: 'shop.example.org', certificate_pem: shop.certPem + ca.pem, private_key_pem: shop.keyPem },
        { hostname: 'media.example.org', certificate_pem: media.certPem + ca.pem, private_key_pem: media.keyPem },
        { hostname: 'k1.example.org', certificate_pem: k1.certPem + ca.pem, private_key_pem: k1.keyPem },
      ],
    }),
    endpoint('legacy', 'legacy.cdn.test', { minimum_protocol_version: 'TLSv1', cipher_policy: 'compatible' }),
    endpoint('tls13', 'tls13.cdn.test', { minimum_protocol_version: 'TLSv1.3', cipher_policy: 'recommended' }),
    endpoint('plain', 'plain.cdn.test', { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended', http_to_https_redirect: true }, { http_version: 'http2' }),
    endpoint('other', 'other.cdn.test', { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended' }, { http_version: 'http2and3' }),
  ],
};
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify(snapshot));
const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), TLS_CERT_FILE: join(dir, 'cdn.pem'), TLS_KEY_FILE: join(dir, 'cdn.key') });
t.teardown(() => { agent.child.kill('SIGKILL'); });
const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);

t.test('SNI chooses the certificate: each custom domain its own, the CDN hostname the wildcard, no SNI the default, an unknown name none', async (t) => {
  for (const [servername, names] of [['shop.example.org', ['shop.example.org']], ['media.example.org', ['media.example.org']], ['strict.cdn.test', ['*.cdn.test']]] as const) {
    const c = await tlsConnect({ port: httpsPort, servername, ca: ca.pem });
    t.same(c.names, names, `${servername}: its certificate, verified against the CA`);
    const res = await c.get(servername, '/a');
    t.equal(res.status, 200, `${servername}: served`);
    t.equal(res.body, 'origin /a');
    c.close();
  }
  const bare = await tlsConnect({ port: httpsPort, servername: null });
  t.same(bare.names, ['*.cdn.test'], 'no SNI: the default certificate');
  bare.close();
  t.not(await handshakeError({ port: httpsPort, servername: 'unknown.example.com' }), '', 'a name without a certificate: the handshake fails');
});

t.test('a custom pair the edge cannot serve (secp256k1) is not loaded: its name has no certificate, the agent says why, the others serve', async (t) => {
  t.not(await handshakeError({ port: httpsPort, servername: 'k1.example.org' }), '', 'no certificate for it: the handshake fails');
  const said = agent.logs.find((l) => l.includes('certificate not served') && l.includes('k1.example.org'));
  t.match(said, /k1\.example\.org: The edge cannot serve this certificate: an ECDSA key on secp256k1 is not served/, said ?? agent.logs.join('\n').slice(-2000));
  const c = await tlsConnect({ port: httpsPort, servername: 'shop.example.org', ca: ca.pem });
  t.equal((await c.get('shop.example.org', '/k1')).status, 200, 'the endpoint\'s other domains are served');
  c.close();
});

t.test('each endpoint\'s minimum version applies to its names: TLS 1.1 is refused where the minimum is 1.2 and accepted where it is 1.0', async (t) => {
  const old = { minVersion: 'TLSv1.1', maxVersion: 'TLSv1.1' } as const;
  t.match(await handshakeError({ port: httpsPort, servername: 'strict.cdn.test', ...old }), /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL/, 'strict: TLS 1.1 refused');
  t.match(await handshakeError({ port: httpsPort, servername: 'shop.example.org', ...old }), /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL/, 'its custom domain too');
  const legacy = await tlsConnect({ port: httpsPort, servername: 'legacy.cdn.test', ...old });
  t.equal(legacy.protocol, 'TLSv1.1', 'legacy (minimum TLSv1, compatible ciphers): TLS 1.1 accepted');
  t.equal((await legacy.get('legacy.cdn.test', '/old')).status, 200);
  legacy.close();
  t.match(await handshakeError({ port: httpsPort, servername: 'tls13.cdn.test', maxVersion: 'TLSv1.2' }), /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL/, 'minimum TLSv1.3: TLS 1.2 refused');
  const modern = await tlsConnect({ port: httpsPort, servername: 'tls13.cdn.test' });
  t.equal(modern.protocol, 'TLSv1.3');
  modern.close();
});

t.test('each endpoint\'s cipher policy applies to its names', async (t) => {
  const cbc = { maxVersion: 'TLSv1.2', ciphers: 'ECDHE-ECDSA-AES128-SHA' } as const;
  t.match(await handshakeError({ port: httpsPort, servername: 'strict.cdn.test', ...cbc }), /HANDSHAKE_FAILURE|NO_SHARED_CIPHER/, 'modern: no CBC cipher');
  t.match(await handshakeError({ port: httpsPort, servername: 'other.cdn.test', ...cbc }), /HANDSHAKE_FAILURE|NO_SHARED_CIPHER/, 'recommended: no CBC cipher');
  const c = await tlsConnect({ port: httpsPort, servername: 'legacy.cdn.test', ...cbc });
  t.equal(c.cipher, 'ECDHE-ECDSA-AES128-SHA', 'compatible: the CBC cipher is accepted');
  c.close();
  const gcm = await tlsConnect({ port: httpsPort, servername: 'strict.cdn.test', maxVersion: 'TLSv1.2' });
  t.match(gcm.cipher, /GCM|CHACHA20/, 'modern over TLS 1.2: an AEAD cipher');
  gcm.close();
});

t.test('a request for a name the connection was not made for is 421; names of one certificate and profile share a connection', async (t) => {
  const c = await tlsConnect({ port: httpsPort, servername: 'shop.example.org' });
  t.equal((await c.get('media.example.org', '/x')).status, 421, 'another custom domain (another certificate) on shop\'s connection');
  t.equal((await c.get('strict.cdn.test', '/x')).status, 421, 'its own endpoint\'s CDN hostname: another certificate');
  t.equal((await c.get('shop.example.org', '/x')).status, 200, 'the connection still serves its own name');
  c.close();
  const w = await tlsConnect({ port: httpsPort, servername: 'other.cdn.test' });
  t.equal((await w.get('plain.cdn.test', '/y')).status, 200, 'two CDN hostnames on the wildcard with the same settings share a connection');
  t.equal((await w.get('strict.cdn.test', '/y')).status, 421, 'not with another minimum version or cipher policy (stricter settings cannot be sidestepped)');
  t.equal((await w.get('legacy.cdn.test', '/y')).status, 421, 'nor with looser ones');
  w.close();
});

t.test('http_to_https_redirect sends viewers to the agent\'s HTTPS port, where the same request is served', async (t) => {
  const answer = await new Promise<{ status: number; location: string }>((resolve, reject) => {
    request({ host: '127.0.0.1', port: agent.port, path: '/page?q=1', headers: { host: 'plain.cdn.test' } }, (r) => {
      r.resume();
      resolve({ status: r.statusCode!, location: String(r.headers.location) });
    }).on('error', reject).end();
  });
  t.same(answer, { status: 301, location: `https://plain.cdn.test:${httpsPort}/page?q=1` });
  const c = await tlsConnect({ port: httpsPort, servername: 'plain.cdn.test' });
  t.equal((await c.get('plain.cdn.test', '/page?q=1')).status, 200, 'over TLS it is served');
  c.close();
});

t.test('a ClientHello that arrives a few bytes at a time is read whole', async (t) => {
  // A relay that passes what the client sends 7 bytes per event-loop turn, and the agent's answer as it comes.
  const relay = createServer((client) => {
    const upstream = netConnect(httpsPort, '127.0.0.1');
    upstream.on('data', (c) => client.write(c));
    upstream.on('close', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.on('data', (chunk: Buffer) => {
      client.pause();
      let at = 0;
      const next = () => {
        if (at >= chunk.length) return client.resume();
        upstream.write(chunk.subarray(at, at + 7));
        at += 7;
        setImmediate(next);
      };
      next();
    });
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  t.teardown(() => relay.close());
  const c = await tlsConnect({ port: (relay.address() as AddressInfo).port, servername: 'media.example.org' });
  t.same(c.names, ['media.example.org']);
  t.equal((await c.get('media.example.org', '/slow')).status, 200);
  c.close();
});

t.test('HTTP/2 is negotiated by ALPN for http2 and http2and3 endpoints, not for an http1.1 one (nor its custom domains); nothing advertises HTTP/3', async (t) => {
  const offer = { alpn: ['h2', 'http/1.1'] };
  for (const [name, expected] of [['other.cdn.test', 'h2'], ['plain.cdn.test', 'h2'], ['strict.cdn.test', 'http/1.1'], ['shop.example.org', 'http/1.1']] as const) {
    const c = await tlsConnect({ port: httpsPort, servername: name, ...offer });
    t.equal(c.alpn, expected, `${name}: ${expected}`);
    c.close();
  }
  t.not(await handshakeError({ port: httpsPort, servername: 'strict.cdn.test', alpn: ['h2'] }), '', 'a client that speaks only h2 is refused by an http1.1 endpoint');
  const session = http2.connect(`https://127.0.0.1:${httpsPort}`, { servername: 'other.cdn.test', rejectUnauthorized: false });
  t.teardown(() => session.close());
  const answer = await new Promise<{ status: number; headers: http2.IncomingHttpHeaders }>((resolve, reject) => {
    const req = session.request({ ':path': '/over-h2', ':authority': 'other.cdn.test' });
    req.on('response', (headers) => { req.resume(); resolve({ status: Number(headers[':status']), headers }); }).on('error', reject);
    req.end();
  });
  t.equal(answer.status, 200, 'served over h2');
  t.equal(answer.headers['alt-svc'], undefined, 'no Alt-Svc: HTTP/3 is not offered');
});

t.test('an upper-case SNI names the same host (RFC 6066 §3): its certificate, and its lower-case Host served over HTTP/1.1 and HTTP/2', async (t) => {
  const c = await tlsConnect({ port: httpsPort, servername: 'SHOP.EXAMPLE.ORG', ca: ca.pem });
  t.same(c.names, ['shop.example.org'], 'the certificate of the name, whatever its case');
  t.equal((await c.get('shop.example.org', '/case')).status, 200, 'Host in lower case: the same name, served');
  t.equal((await c.get('Shop.Example.Org', '/case')).status, 200, 'Host in mixed case too');
  t.equal((await c.get('media.example.org', '/case')).status, 421, 'another name is still another connection\'s');
  c.close();
  const dotted = await tlsConnect({ port: httpsPort, servername: 'Media.Example.Org.', ca: ca.pem });
  t.equal((await dotted.get('media.example.org', '/case')).status, 200, 'a trailing dot names the same host');
  dotted.close();
  const session = http2.connect(`https://127.0.0.1:${httpsPort}`, { servername: 'OTHER.CDN.TEST', rejectUnauthorized: false });
  t.teardown(() => session.close());
  const status = (authority: string) => new Promise<number>((resolve, reject) => {
    const req = session.request({ ':path': '/case-h2', ':authority': authority });
    req.on('response', (headers) => { req.resume(); resolve(Number(headers[':status'])); }).on('error', reject);
    req.end();
  });
  t.equal(await status('other.cdn.test'), 200, 'HTTP/2: the lower-case :authority of an upper-case SNI is served');
  t.equal(await status('strict.cdn.test'), 421, 'HTTP/2: another profile\'s name still needs its own connection');
});
