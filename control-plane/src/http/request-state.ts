// Per-request state (ctx.state), which is also the request context services
// take: the request id, the caller once authenticated, and a logger, entity
// manager, address, user agent and locale made on first use, since most
// requests log once or not at all and token-only routes never touch the
// database. A class, so the lazy members cost nothing per request until used.
import type { Context } from 'koa';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { localeFromAcceptLanguage, type Actor, type RequestContext } from '../core/request-context.ts';
import type { MatchTier } from '../permissions/catalog.ts';
import { PROFILE_TOKEN_HEADER } from './headers.ts';
import type { RouteDefinition } from './route.ts';

export interface RequestStateServices {
  log: Logger;
  db: { orm: { em: { fork(): unknown } } };
}

export class RequestState implements RequestContext {
  readonly requestId: string;
  actor: Actor | null = null;
  access: MatchTier | null = null;
  /** The declared route that matched (for the contract check of error replies). */
  route: RouteDefinition | undefined = undefined;
  /** Path pattern of whatever matched, declared route or system endpoint (metrics and logs). */
  routePath = 'unmatched';
  /**
   * The client sent If-Match to a route that takes it (the router decides, once): a stale version is then
   * the client's failed precondition (412), otherwise another writer's change to retry (409).
   */
  preconditioned = false;
  readonly #services: RequestStateServices;
  readonly #ctx: Context;
  #log: Logger | undefined;
  #em: EntityManager | undefined;

  constructor(services: RequestStateServices, ctx: Context, requestId: string) {
    this.#services = services;
    this.#ctx = ctx;
    this.requestId = requestId;
  }

  get log(): Logger {
    return (this.#log ??= this.#services.log.child({ request_id: this.requestId }));
  }

  get em(): EntityManager {
    return (this.#em ??= this.#services.db.orm.em.fork() as EntityManager);
  }

  /** Forgets the entity manager and what it loaded: the next use forks a fresh one (a write run again after a conflict). */
  discardEntityManager(): void {
    this.#em = undefined;
  }

  get ip(): string {
    return this.#ctx.ip;
  }

  get userAgent(): string {
    return this.#ctx.get('user-agent').slice(0, 512);
  }

  get locale(): string | null {
    return localeFromAcceptLanguage(this.#ctx.get('accept-language'));
  }

  get profileToken(): string | null {
    return this.#ctx.get(PROFILE_TOKEN_HEADER) || null;
  }
}
