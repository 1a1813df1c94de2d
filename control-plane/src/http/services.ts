// What every handler can reach through `input.app`. Capability modules add
// their services here as they land.
import type { Context } from 'koa';
import type { Logger } from 'pino';
import type { Config } from '../config/config.ts';
import type { SessionService } from '../auth/session-service.ts';
import type { TokenService } from '../auth/token-service.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { Database } from '../db/orm.ts';
import type { DeferredTasks } from '../jobs/deferred-tasks.ts';
import type { Mailer } from '../mail/mailer.ts';
import type { KeyValueStore } from '../store/index.ts';
import type { AccessRule } from './route.ts';

/** The caller of a request once authenticated (set on ctx.state.auth). */
export interface Caller {
  /** `user` for a person's access token, `api_token` for a machine token. */
  type: 'user' | 'api_token';
  id: string;
  /** Roles as evaluated for this request (informational; permissions are checked against stored data). */
  roles: string[];
  /** Session id for user tokens. */
  sessionId?: string;
  /** Token id (jti) for revocation. */
  tokenId?: string;
  tokenExpiresAt?: number;
}

export interface AccessControl {
  /** Establishes ctx.state.auth from the request's credentials; throws 401 when the rule needs a caller and none is valid. */
  authenticate(ctx: Context, rule: AccessRule): Promise<void>;
  /** Checks the permission of the rule against stored roles; throws 403. Runs after validation. */
  authorize(ctx: Context, rule: AccessRule, input: { params: unknown; query: unknown; body: unknown }): Promise<void>;
}

export interface AppServices {
  config: Config;
  db: Database;
  store: KeyValueStore;
  log: Logger;
  access: AccessControl;
  version: string;
  mailer: Mailer;
  /** Encrypts secrets at rest (TOTP secrets, signing keys, private keys). */
  secretBox: SecretBox;
  /** Key for hashing refresh, reset and API tokens and recovery codes. */
  tokenPepper: Buffer;
  tokens: TokenService;
  sessions: SessionService;
  /** Work handed off to run after the response (e-mail that must not show in response times). */
  deferred: DeferredTasks;
  /** Health of the configuration pushed to edge nodes (the edge channel provides it). */
  edgeConfigHealth?: () => Promise<{ status: 'ok' | 'error' | 'not_configured'; latency_ms: number | null }>;
}
