// Per-request state (ctx.state): the request id, and a logger and entity
// manager made on first use, since most requests log once or not at all and
// token-only routes never touch the database. A class, so the lazy members
// cost nothing per request until used.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { MatchTier } from '../auth/permissions/catalog.ts';
import type { AppServices, Caller } from './services.ts';

export class RequestState {
  readonly requestId: string;
  auth: Caller | undefined = undefined;
  permissionTier: MatchTier | undefined = undefined;
  readonly #app: AppServices;
  #log: Logger | undefined;
  #em: EntityManager | undefined;

  constructor(app: AppServices, requestId: string) {
    this.#app = app;
    this.requestId = requestId;
  }

  get log(): Logger {
    return (this.#log ??= this.#app.log.child({ request_id: this.requestId }));
  }

  get em(): EntityManager {
    return (this.#em ??= this.#app.db.orm.em.fork() as EntityManager);
  }
}
