// The CAs custom certificates may chain to: Node's bundled roots, the system's store and the operator's file.
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { makeCa, makeLeaf, trustedTestCa } from '../../../test/support/certificates.ts';
import { trustStore } from './certificate-trust.ts';

t.test('a public root (Node\'s bundle) and a root of the system\'s store anchor themselves and what they signed; another CA anchors nothing', async (t) => {
  const store = trustStore({});
  const bundled = new X509Certificate(tls.rootCertificates[0]!);
  t.equal(store.anchorFor(bundled)?.fingerprint256, bundled.fingerprint256);
  const system = tls.getCACertificates('system').map((pem) => new X509Certificate(pem)).find((c) => c.ca);
  if (system) t.equal(store.anchorFor(system)?.fingerprint256, system.fingerprint256, 'the system store');
  const stranger = await makeCa('Stranger');
  t.equal(store.anchorFor(new X509Certificate(stranger.pem)), undefined);
});

t.test('CUSTOM_CERT_CA_FILE: its CA anchors the chains it signed, beside the public roots', async (t) => {
  const { ca, file } = await trustedTestCa('Operator CA');
  const store = trustStore({ caFile: file });
  const leaf = new X509Certificate((await makeLeaf(ca, ['a.example.org'])).certPem);
  t.equal(store.anchorFor(leaf)?.fingerprint256, new X509Certificate(ca.pem).fingerprint256);
  t.ok(store.anchorFor(new X509Certificate(tls.rootCertificates[0]!)), 'the public roots still count');
  const other = await makeCa('Operator CA');
  t.equal(store.anchorFor(new X509Certificate((await makeLeaf(other, ['a.example.org'])).certPem)), undefined, 'the same name with another key is not trusted');
});
