// What a service is told about the request it works for: who acts (actor),
// from where (address, user agent), under which request id and locale, and
// the unit of work (entity manager) and logger of that request. HTTP routes,
// the gRPC channel and background jobs all build one, so services never see
// Koa's ctx and every entry point calls the same services.
import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { MatchTier, PermissionGrant } from '../permissions/catalog.ts';

/** Who acts: a person (access token), a machine (API token), or the platform itself (jobs). */
export interface Actor {
  type: 'user' | 'api_token' | 'system';
  id: string;
  /** Roles as evaluated for this request (informational; permissions are checked against stored data). */
  roles: string[];
  /** Session of a user's access token. */
  sessionId?: string;
  /** Access token id (jti), for revocation. */
  tokenId?: string;
  tokenExpiresAt?: number;
  /**
   * A user actor's stored row as authorization read it for this request (its
   * status and roles were judged on it), so the request needs no second read
   * of the caller's own record. Columns as the database returns them.
   */
  record?: Readonly<Record<string, unknown>>;
  /**
   * The permissions the caller holds, when authentication read them with the caller in the same
   * statement (API tokens: their role's); otherwise authorization reads them.
   */
  grants?: PermissionGrant[];
}

export interface RequestContext {
  readonly requestId: string;
  /** Client address ('' when no client: jobs). */
  readonly ip: string;
  readonly userAgent: string;
  /** First BCP 47 tag of Accept-Language, if any. */
  readonly locale: string | null;
  /** The profile token the client presented (X-Profile-Token), unchecked; null when none. Checked by auth's requireProfileToken. */
  readonly profileToken: string | null;
  /** Set by authentication; null for anonymous callers and jobs without an actor. */
  actor: Actor | null;
  /**
   * The tier that satisfied the operation's permission; 'global' whenever the
   * caller also holds it globally (even if a narrower grant matched first),
   * and then the caller acts on anyone's resources.
   */
  access: MatchTier | null;
  /** The request's unit of work (forked on first use). */
  readonly em: EntityManager;
  /** A logger carrying the request id. */
  readonly log: Logger;
}

const LANGUAGE_TAG = /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/;

/** First language tag of an Accept-Language header, if it looks like BCP 47. */
export function localeFromAcceptLanguage(header: string | undefined): string | null {
  if (!header) return null;
  const first = header.split(',')[0]?.split(';')[0]?.trim();
  return first && LANGUAGE_TAG.test(first) ? first : null;
}

/** A context for work that no client asked for (jobs, start-up tasks, CLIs). */
export function systemContext(services: { db: { orm: { em: { fork(): unknown } } }; log: Logger }, options: { actor?: Actor | null; requestId?: string } = {}): RequestContext {
  const requestId = options.requestId ?? `job-${randomUUID()}`;
  let em: EntityManager | undefined;
  let log: Logger | undefined;
  return {
    requestId,
    ip: '',
    userAgent: '',
    locale: null,
    profileToken: null,
    actor: options.actor ?? null,
    access: options.actor ? 'global' : null,
    get em() { return (em ??= services.db.orm.em.fork() as EntityManager); },
    get log() { return (log ??= services.log.child({ request_id: requestId })); },
  };
}

/** Tasks a transaction's context runs once the transaction has committed (see afterCommit). */
const commitTasks = new WeakMap<RequestContext, (() => void)[]>();

/**
 * Runs `task` once the transaction `rc` belongs to has committed, and never
 * when it rolls back (e-mail about a change that must not go out before the
 * change is stored). Outside a transaction started by inTransaction, the
 * caller's work is already stored, so the task runs at once.
 */
export function afterCommit(rc: RequestContext, task: () => void): void {
  const tasks = commitTasks.get(rc);
  if (tasks) tasks.push(task);
  else task();
}

/**
 * Where rc's raw statements run (executeBound, db/bulk.ts: parameters bound, not spliced into the text): the
 * transaction's entity manager inside inTransaction, else the root one, whose statements run straight on the pool,
 * committed on their own, without forking an entity manager for the request (a hot path that never loads an entity).
 */
export function statementsOf(rc: RequestContext, db: { orm: { em: EntityManager } }): EntityManager {
  return commitTasks.has(rc) ? rc.em : db.orm.em;
}

/**
 * Runs `work` in one database transaction, with a context whose `em` is the
 * transaction's: every change the work makes through `rc.em` — entities,
 * raw statements, audit entries — commits or rolls back together. Tasks
 * registered with afterCommit run after the commit (a nested call hands its
 * tasks to the enclosing transaction).
 */
export async function inTransaction<T>(rc: RequestContext, work: (tx: RequestContext) => Promise<T>): Promise<T> {
  const tasks: (() => void)[] = [];
  const result = await rc.em.transactional((em) => {
    const tx: RequestContext = {
      requestId: rc.requestId,
      ip: rc.ip,
      userAgent: rc.userAgent,
      locale: rc.locale,
      profileToken: rc.profileToken,
      actor: rc.actor,
      access: rc.access,
      em: em as EntityManager,
      log: rc.log,
    };
    commitTasks.set(tx, tasks);
    return work(tx);
  });
  for (const task of tasks) afterCommit(rc, task);
  return result;
}
