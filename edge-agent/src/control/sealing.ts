// Sealing the configuration the agent keeps in DATA_DIR (config-store.ts):
// resource bodies hold signing-key secrets, certificate private keys, log-drain
// credentials and origin header values, so every file of the stored
// configuration is encrypted (AES-256-GCM, a fresh 96-bit nonce per file, the
// file's role as associated data so files cannot be swapped) with a key that
// is not stored beside them: derived from the agent token (HKDF-SHA256),
// which production passes in the environment. The agent still restarts from
// disk with the control plane down; a changed token (rotated, reissued) cannot
// open the old files, and the agent then starts without them until the
// control plane sends its configuration.
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';

const MAGIC = Buffer.from('ESL1');
const NONCE = 12;
const TAG = 16;

export class SealError extends Error {
  override name = 'SealError';
}

export class StateKey {
  private readonly key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new RangeError('a state key is 32 bytes');
    this.key = key;
  }

  /** The key of an agent token: HKDF-SHA256 of the token, so the token itself never keys anything directly. */
  static fromAgentToken(token: string): StateKey {
    return new StateKey(Buffer.from(hkdfSync('sha256', token, 'edge-agent', 'configuration at rest v1', 32)));
  }

  seal(plaintext: Uint8Array, role: string): Buffer {
    const nonce = randomBytes(NONCE);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(Buffer.from(role, 'utf8'));
    const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return Buffer.concat([MAGIC, nonce, cipher.getAuthTag(), body]);
  }

  /** Throws SealError when the file was not sealed for this role with this key (another token, or damaged). */
  open(sealed: Buffer, role: string): Buffer {
    if (!isSealed(sealed) || sealed.length < MAGIC.length + NONCE + TAG) throw new SealError('not a sealed file');
    const nonce = sealed.subarray(MAGIC.length, MAGIC.length + NONCE);
    const tag = sealed.subarray(MAGIC.length + NONCE, MAGIC.length + NONCE + TAG);
    const decipher = createDecipheriv('aes-256-gcm', this.key, nonce);
    decipher.setAAD(Buffer.from(role, 'utf8'));
    decipher.setAuthTag(tag);
    try {
      return Buffer.concat([decipher.update(sealed.subarray(MAGIC.length + NONCE + TAG)), decipher.final()]);
    } catch {
      throw new SealError('sealed with another key (was the agent token changed?) or damaged');
    }
  }

  /** A file name that does not reveal the body's SHA-256 (which could confirm a guessed secret). */
  name(sha256: string): string {
    return createHmac('sha256', this.key).update(sha256).digest('hex');
  }
}

export const isSealed = (data: Buffer) => data.length >= MAGIC.length && data.subarray(0, MAGIC.length).equals(MAGIC);
