// Encryption of secrets at rest: AES-256-GCM under a key-encryption key (SECRETS_KEY).
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

const VERSION = 'v1';
const KEY_BYTES = 32;
const IV_BYTES = 12; // the GCM standard nonce size; random is safe far below 2^32 messages per key
const TAG_BYTES = 16;
const SEALED_RE = /^v1\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]*)$/;

export class SecretBoxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SecretBoxError';
  }
}

/**
 * SECRETS_KEY as 32 bytes: 64 hex characters, or base64/base64url (43 or 44
 * characters). Anything else is refused, so a typo cannot silently become a weak key.
 */
export function parseSecretsKey(value: string): Buffer {
  const v = value.trim();
  let key: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(v)) key = Buffer.from(v, 'hex');
  else if (/^[A-Za-z0-9+/]{43}=?$/.test(v) || /^[A-Za-z0-9_-]{43}$/.test(v)) key = Buffer.from(v, 'base64');
  if (!key || key.length !== KEY_BYTES) {
    throw new SecretBoxError('SECRETS_KEY must be 32 bytes as 64 hex characters or base64 (44 characters)');
  }
  if (key.every((b) => b === key[0])) throw new SecretBoxError('SECRETS_KEY must be random, not a repeated byte');
  return key;
}

/** A new random key-encryption key, base64. */
export function generateSecretsKey(): string {
  return randomBytes(KEY_BYTES).toString('base64');
}

/**
 * Subkey for another purpose (token pepper, signed download links ...) via
 * HKDF-SHA256, so one SECRETS_KEY serves all without reusing the same bytes.
 */
export function deriveKey(kek: Uint8Array, purpose: string, length = 32): Buffer {
  if (kek.length !== KEY_BYTES) throw new SecretBoxError('key-encryption key must be 32 bytes');
  return Buffer.from(hkdfSync('sha256', kek, Buffer.alloc(0), `streaming-platform:${purpose}`, length));
}

// The version is bound into the AAD so a ciphertext cannot be replayed under another format version.
const aadFor = (aad: string | undefined): Buffer => Buffer.from(`${VERSION}\0${aad ?? ''}`, 'utf8');

export class SecretBox {
  #key: Buffer;
  #previousKeys: Buffer[];

  /**
   * `previousKeys` only decrypt: set them while re-encrypting records after a
   * SECRETS_KEY change.
   */
  constructor(key: Uint8Array, previousKeys: readonly Uint8Array[] = []) {
    for (const k of [key, ...previousKeys]) {
      if (k.length !== KEY_BYTES) throw new SecretBoxError('secret box keys must be 32 bytes');
    }
    this.#key = Buffer.from(key);
    this.#previousKeys = previousKeys.map((k) => Buffer.from(k));
  }

  /**
   * `v1.<iv>.<tag>.<ciphertext>`, base64url parts. `aad` (e.g. table and
   * record id) must be given again to open, so a ciphertext copied to
   * another record does not decrypt.
   */
  seal(plaintext: string | Uint8Array, aad?: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(aadFor(aad));
    const data = typeof plaintext === 'string' ? Buffer.from(plaintext, 'utf8') : plaintext;
    const ct = Buffer.concat([cipher.update(data), cipher.final()]);
    const tag = cipher.getAuthTag();
    return [VERSION, iv.toString('base64url'), tag.toString('base64url'), ct.toString('base64url')].join('.');
  }

  /** Plaintext bytes; SecretBoxError when the format, key, AAD or any byte is wrong. */
  open(sealed: string, aad?: string): Buffer {
    const m = SEALED_RE.exec(sealed);
    if (!m) throw new SecretBoxError('not a sealed secret');
    const iv = Buffer.from(m[1]!, 'base64url');
    const tag = Buffer.from(m[2]!, 'base64url');
    const ct = Buffer.from(m[3]!, 'base64url');
    if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new SecretBoxError('not a sealed secret');
    for (const key of [this.#key, ...this.#previousKeys]) {
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
        decipher.setAAD(aadFor(aad));
        decipher.setAuthTag(tag);
        return Buffer.concat([decipher.update(ct), decipher.final()]);
      } catch {
        // wrong key or tampered: try the next key, then fail
      }
    }
    // One message for every cause: no oracle telling which part was wrong.
    throw new SecretBoxError('secret could not be decrypted');
  }

  openString(sealed: string, aad?: string): string {
    return this.open(sealed, aad).toString('utf8');
  }

  /** True when sealed under a previous key: re-seal it with seal(open(x)). */
  needsReseal(sealed: string, aad?: string): boolean {
    if (this.#previousKeys.length === 0) return false;
    try {
      new SecretBox(this.#key).open(sealed, aad);
      return false;
    } catch {
      return true;
    }
  }
}

/** The deriveKey purpose of the token pepper (CoreServices.tokenPepper): the composition root and the CLIs derive it alike. */
export const TOKEN_PEPPER_PURPOSE = 'token-pepper';
/** The deriveKey purpose of the secret box (CoreServices.secretBox): the composition root and the commands derive it alike. */
export const SECRET_BOX_PURPOSE = 'secret-box';

export const DEV_KEY_FILE = 'secrets.key';

/**
 * Development only: the key in DATA_DIR/secrets.key, created (mode 0600) on
 * first use, so secrets survive restarts without any setup.
 */
export async function loadOrCreateDevKey(dataDir: string): Promise<Buffer> {
  const file = path.join(dataDir, DEV_KEY_FILE);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  try {
    // 'wx' fails if the file exists, so two processes starting together keep one key.
    await writeFile(file, generateSecretsKey() + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const key = parseSecretsKey(await readFile(file, 'utf8'));
  await chmod(file, 0o600); // tighten a file copied in with looser permissions
  return key;
}

/**
 * SECRETS_KEY when set; otherwise the dev key file, except in production
 * where a missing key is a start-up error (a generated key would be lost
 * with the container and every secret with it).
 */
export async function loadSecretsKey(opts: {
  secretsKey?: string | undefined;
  dataDir: string;
  production: boolean;
}): Promise<Buffer> {
  if (opts.secretsKey !== undefined && opts.secretsKey.trim() !== '') return parseSecretsKey(opts.secretsKey);
  if (opts.production) throw new SecretBoxError('SECRETS_KEY is required in production');
  return loadOrCreateDevKey(opts.dataDir);
}
