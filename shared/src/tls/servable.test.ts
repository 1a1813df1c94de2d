// The edge serves RSA keys of 2048 bits or more and ECDSA keys on P-256 or P-384, in a pair that loads into a TLS
// context; every other certificate is refused with the reason (the control plane's 422, the agent's problem line).
import t from 'tap';
import { makeCa, makeLeaf, makeLeafOfKeyType, newKeys, keyPem } from '../../../test/support/certificates.ts';
import { servableContext, unservableReason } from './servable.ts';

const ca = await makeCa('Servable CA');

t.test('RSA-2048, P-256 and P-384 leaves are served', async (t) => {
  for (const type of ['rsa-2048', 'p-384'] as const) {
    const leaf = await makeLeafOfKeyType(ca, ['ok.example.org'], type);
    t.equal(unservableReason(leaf.certPem + ca.pem, leaf.keyPem), undefined, type);
  }
  const p256 = await makeLeaf(ca, ['ok.example.org']);
  t.ok(servableContext(p256.certPem + ca.pem, p256.keyPem).context, 'P-256: a context to serve');
});

t.test('RSA-1024, secp256k1 and brainpool leaves are refused, naming the key and what is served', async (t) => {
  const cases = [
    ['rsa-1024', /RSA key of 1024 bits is too short to serve \(at least 2048\)/],
    ['secp256k1', /ECDSA key on secp256k1 is not served \(curves served: P-256, P-384\)/],
    ['brainpoolP256r1', /ECDSA key on brainpoolP256r1 is not served/],
  ] as const;
  for (const [type, reason] of cases) {
    const leaf = await makeLeafOfKeyType(ca, ['bad.example.org'], type);
    const result = servableContext(leaf.certPem + ca.pem, leaf.keyPem);
    t.equal(result.context, undefined, type);
    t.match(result.problem, reason, type);
    t.match(result.problem, /use RSA \(2048 bits or more\) or ECDSA P-256 or P-384/);
  }
});

t.test('a pair that does not load (the key of another certificate, no PEM) is refused', async (t) => {
  const leaf = await makeLeaf(ca, ['a.example.org']);
  t.match(unservableReason(leaf.certPem, await keyPem(await newKeys())), /^The edge cannot load this certificate and key \(/);
  t.equal(unservableReason('hello', leaf.keyPem), 'The certificate is not PEM');
});
