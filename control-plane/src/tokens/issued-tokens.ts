// The life cycle every issued token of the platform shares (CDN API tokens,
// edge agent tokens): issued with a fresh value that is answered once and
// stored only as its keyed hash, revoked at once and for good, rotated
// atomically (the old one revoked, a successor issued, in one transaction),
// each step audit-logged without the value. A capability describes its kind
// of token (entity, label, audited fields) and mints the values; this holds
// the steps, so the kinds cannot drift apart.
import { LockMode, type EntityClass } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, found, validationError } from '../http/errors.ts';

/** The columns every issued-token entity has. */
export interface IssuedTokenEntity {
  id: string;
  status: 'active' | 'revoked';
  expires_at?: Date | null;
  revoked_at?: Date | null;
  replaced_by?: string | null;
}

/** A fresh value and the columns that identify it (its keyed hash, a hint): never the value itself. */
export interface MintedToken {
  value: string;
  columns: Record<string, unknown>;
}

/** A token record with its value, as create and rotate answer it once. */
export type WithValue<T> = T & { token: string };

export interface IssuedTokenKind<T extends IssuedTokenEntity> {
  entity: EntityClass<T>;
  /** What messages call it, in a sentence: 'API token', 'agent token'. */
  label: string;
  /** Audit resource type, and prefix of its actions: 'api_token' → api_token.created, .revoked, .rotated. */
  resourceType: string;
  /** The fields audit entries record (never the value or its hash). */
  audited: readonly (keyof T & string)[];
}

export interface IssuedTokens<T extends IssuedTokenEntity> {
  find(em: EntityManager, id: string): Promise<T>;
  /** A new active token with `fields` (expires_at, if set, must be after `now`: 400 otherwise). */
  create(rc: RequestContext, now: Date, minted: MintedToken, fields: Partial<T>): Promise<WithValue<T>>;
  /** Revoked for good (409 when it already is); the verifier reads the status on every use, so use stops with the commit. */
  revoke(rc: RequestContext, id: string, now: Date): Promise<T>;
  /**
   * The token revoked and a successor issued with the fields `successor`
   * derives from it, in one transaction (no grace period); the old record
   * names it in `replaced_by`. A revoked or expired token cannot be rotated (409).
   */
  rotate(rc: RequestContext, id: string, now: Date, minted: MintedToken, successor: (old: T, tx: RequestContext) => Partial<T>): Promise<WithValue<T>>;
}

export function issuedTokens<T extends IssuedTokenEntity>(kind: IssuedTokenKind<T>): IssuedTokens<T> {
  const what = kind.label.charAt(0).toUpperCase() + kind.label.slice(1);
  const snapshot = (token: T) => Object.fromEntries(kind.audited.map((f) => [f, token[f]]));
  const notActive = () => new ApiError('CONFLICT', `The ${kind.label} is revoked; revocation is irreversible`);

  function issue(rc: RequestContext, minted: MintedToken, fields: Partial<T>): WithValue<T> {
    const token = rc.em.create(kind.entity, { ...fields, ...minted.columns, status: 'active' } as never) as T;
    // A copy of one shape (not a prototype link) carrying the value for this one answer.
    return { ...token, token: minted.value };
  }

  /** The token's row locked for the rest of the transaction: concurrent revokes and rotations of one token run one after the other. */
  async function locked(em: EntityManager, id: string): Promise<T> {
    return found(await em.findOne(kind.entity, id as never, { lockMode: LockMode.PESSIMISTIC_WRITE }), what) as T;
  }

  return {
    async find(em, id) {
      return found(await em.findOne(kind.entity, id as never), what) as T;
    },

    async create(rc, now, minted, fields) {
      if (fields.expires_at && fields.expires_at <= now) throw validationError([{ field: 'expires_at', message: 'Must be in the future' }]);
      const issued = issue(rc, minted, fields);
      recordAudit(rc, { action: `${kind.resourceType}.created`, resource_type: kind.resourceType, resource_id: issued.id, changes: changesOf({}, snapshot(issued)) });
      await rc.em.flush();
      return issued;
    },

    async revoke(rc, id, now) {
      return inTransaction(rc, async (tx) => {
        const token = await locked(tx.em, id);
        if (token.status !== 'active') throw notActive();
        token.status = 'revoked';
        token.revoked_at = now;
        recordAudit(tx, {
          action: `${kind.resourceType}.revoked`, resource_type: kind.resourceType, resource_id: token.id,
          changes: { status: { from: 'active', to: 'revoked' } },
        });
        await tx.em.flush();
        return token;
      });
    },

    async rotate(rc, id, now, minted, successor) {
      return inTransaction(rc, async (tx) => {
        const old = await locked(tx.em, id);
        if (old.status !== 'active') throw notActive();
        if (old.expires_at && old.expires_at <= now) throw new ApiError('CONFLICT', `The ${kind.label} has expired; create a new one`);
        const issued = issue(tx, minted, successor(old, tx));
        old.status = 'revoked';
        old.revoked_at = now;
        old.replaced_by = issued.id;
        recordAudit(tx, {
          action: `${kind.resourceType}.rotated`, resource_type: kind.resourceType, resource_id: old.id,
          changes: { status: { from: 'active', to: 'revoked' } }, metadata: { replaced_by: issued.id },
        });
        recordAudit(tx, {
          action: `${kind.resourceType}.created`, resource_type: kind.resourceType, resource_id: issued.id,
          changes: changesOf({}, snapshot(issued)), metadata: { rotated_from: old.id },
        });
        await tx.em.flush();
        return issued;
      });
    },
  };
}
