// The platform services every capability may use, built once by the
// composition root (server.ts). A capability that adds services of its own
// (auth's tokens and sessions) declares them as an extension of these, and the
// composition root's object satisfies them all.
import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import type { Config } from '../config/config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { Database } from '../db/orm.ts';
import type { Mailer } from '../mail/mailer.ts';
import type { KeyValueStore } from '../store/index.ts';

/** Work handed off to run after the response (jobs/deferred-tasks.ts implements it). */
export interface Deferred {
  /** Runs `task` soon, after the caller has returned; its errors are logged, never thrown. */
  defer(name: string, task: () => Promise<void>, log?: Logger): void;
  /** Resolves when everything handed off so far has finished (tests). */
  idle(): Promise<void>;
}

export interface CoreServices {
  config: Config;
  db: Database;
  store: KeyValueStore;
  log: Logger;
  /** The time every decision by the clock uses (a ManualClock in tests). */
  clock: Clock;
  version: string;
  mailer: Mailer;
  /** Encrypts secrets at rest (TOTP secrets, signing keys, private keys). */
  secretBox: SecretBox;
  /** Key for hashing refresh, reset and API tokens and recovery codes. */
  tokenPepper: Buffer;
  /** Derives further keys from the secrets key, one per purpose. */
  deriveKey(purpose: string): Buffer;
  /** Work handed off to run after the response (e-mail that must not show in response times). */
  deferred: Deferred;
}
