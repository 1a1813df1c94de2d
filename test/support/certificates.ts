// Certificates and keys made inside a test (ECDSA P-256 through @peculiar/x509):
// a CA, leaves it signs with chosen names and validity, a key of its own.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createPrivateKey, generateKeyPairSync, randomBytes, webcrypto } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;

export interface TestCa { name: string; cert: x509.X509Certificate; keys: webcrypto.CryptoKeyPair; pem: string }
export interface TestLeaf { certPem: string; keyPem: string }

const serial = () => '01' + randomBytes(8).toString('hex');
const window = (from: Date, days: number) => ({ notBefore: new Date(from.getTime() - 60_000), notAfter: new Date(from.getTime() + days * DAY) });

export async function keyPem(keys: webcrypto.CryptoKeyPair): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ type: 'pkcs8', format: 'pem' }) as string;
}

export const newKeys = () => webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;

/** A CA; with `issuer` an intermediate signed by it. */
export async function makeCa(name: string, options: { issuer?: TestCa; now?: Date; days?: number } = {}): Promise<TestCa> {
  const keys = await newKeys();
  const { notBefore, notAfter } = window(options.now ?? new Date(), options.days ?? 3650);
  const extensions = [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)];
  const cert = options.issuer
    ? await x509.X509CertificateGenerator.create({ serialNumber: serial(), subject: `CN=${name}`, issuer: options.issuer.cert.subject, notBefore, notAfter, publicKey: keys.publicKey, signingKey: options.issuer.keys.privateKey, signingAlgorithm: ALGORITHM, extensions }, webcrypto)
    : await x509.X509CertificateGenerator.createSelfSigned({ serialNumber: serial(), name: `CN=${name}`, notBefore, notAfter, keys, signingAlgorithm: ALGORITHM, extensions }, webcrypto);
  return { name, cert, keys, pem: cert.toString('pem') + '\n' };
}

/** A leaf for `names` signed by `ca`, valid from `now` (minus a minute) for `days` (negative: already expired; `startDays` shifts the start). */
export async function makeLeaf(ca: TestCa, names: string[], options: { now?: Date; days?: number; startDays?: number; keys?: webcrypto.CryptoKeyPair } = {}): Promise<TestLeaf & { keys: webcrypto.CryptoKeyPair }> {
  const keys = options.keys ?? (await newKeys());
  const start = new Date((options.now ?? new Date()).getTime() + (options.startDays ?? 0) * DAY);
  const { notBefore, notAfter } = window(start, options.days ?? 90);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(), subject: `CN=${names[0]}`, issuer: ca.cert.subject, notBefore, notAfter, publicKey: keys.publicKey, signingKey: ca.keys.privateKey,
    signingAlgorithm: ALGORITHM, extensions: [new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value })))],
  }, webcrypto);
  return { certPem: cert.toString('pem') + '\n', keyPem: await keyPem(keys), keys };
}

/**
 * A CA the control plane trusts for custom certificates: its certificate written to a file passed as
 * CUSTOM_CERT_CA_FILE (spread `env` into the control plane's). A self-signed certificate or another CA's
 * chain is refused (cdn/certificate-trust.ts).
 */
export async function trustedTestCa(name: string, options: { now?: Date } = {}): Promise<{ ca: TestCa; file: string; env: { CUSTOM_CERT_CA_FILE: string } }> {
  const ca = await makeCa(name, options);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sp-test-ca-'));
  const file = path.join(dir, 'ca.pem');
  writeFileSync(file, ca.pem);
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return { ca, file, env: { CUSTOM_CERT_CA_FILE: file } };
}

/** Key types for leaves the edge may or may not serve (shared/src/tls/servable.ts). */
export type LeafKeyType = 'rsa-1024' | 'rsa-2048' | 'p-384' | 'secp256k1' | 'brainpoolP256r1';

/** A leaf for `names` signed by `ca` whose own key is of `type` (made by node:crypto; the CA signs with P-256). */
export async function makeLeafOfKeyType(ca: TestCa, names: string[], type: LeafKeyType, options: { now?: Date; days?: number } = {}): Promise<TestLeaf> {
  const pair = type.startsWith('rsa-')
    ? generateKeyPairSync('rsa', { modulusLength: Number(type.slice(4)) })
    : generateKeyPairSync('ec', { namedCurve: type === 'p-384' ? 'secp384r1' : type });
  const spki = pair.publicKey.export({ type: 'spki', format: 'der' });
  const { notBefore, notAfter } = window(options.now ?? new Date(), options.days ?? 90);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(), subject: `CN=${names[0]}`, issuer: ca.cert.subject, notBefore, notAfter, publicKey: new Uint8Array(spki), signingKey: ca.keys.privateKey,
    signingAlgorithm: ALGORITHM, extensions: [new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value })))],
  }, webcrypto);
  return { certPem: cert.toString('pem') + '\n', keyPem: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
}
