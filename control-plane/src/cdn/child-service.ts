// The bookkeeping routes and cache rules share: find, create, update,
// enable/disable and delete with an audit entry in the same unit of work. The
// resource's own checks (`problems`) run on the would-be state first; any
// problem refuses the write with 422 INVALID_CONFIGURATION, nothing stored.
import type { EntityName } from '@mikro-orm/core';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { found, type FieldError } from '../http/errors.ts';
import { Endpoint } from './cdn.entities.ts';
import { assertValidConfiguration } from './fields.ts';
import type { ChildService } from './child-routes.ts';

interface Child {
  id: string;
  enabled: boolean;
  distribution: { id: string };
}

export interface ChildDefinition<E extends Child, C, U> {
  entity: EntityName<E>;
  /** `route`, `cache_rule` (audit resource type and action prefix). */
  type: string;
  what: string;
  fields: readonly (keyof E & string)[];
  defaults: Partial<E>;
  /** The stored values a create input or a partial update gives (nested objects merged). */
  values(input: C | U, current: E | null): Partial<E>;
  /** What would be invalid about `next` in `distributionId` (and side effects to apply when valid, such as an origin joining). */
  problems(rc: RequestContext, next: E, distributionId: string, changed: (keyof E)[]): Promise<{ problems: FieldError[]; apply?: () => void }>;
  /** Where a top-level create without distribution_id gets its distribution (routes: the origin's). */
  distributionOf?(rc: RequestContext, input: C): Promise<string | null>;
}

export function childService<E extends Child, C, U>(d: ChildDefinition<E, C, U>): ChildService<E, C, U> {
  const snapshot = (e: E) => ({ ...Object.fromEntries(d.fields.map((f) => [f, e[f]])), distribution_id: e.distribution.id }) as Record<string, unknown>;
  const find = async (rc: RequestContext, id: string) => found(await rc.em.findOne(d.entity, { id } as never), d.what) as E;
  const check = async (rc: RequestContext, next: E, changed: (keyof E)[]) => {
    const { problems, apply } = await d.problems(rc, next, next.distribution.id, changed);
    assertValidConfiguration(problems);
    apply?.();
  };
  return {
    find,
    async create(rc, input, distributionId) {
      const distribution = distributionId ?? (await d.distributionOf?.(rc, input)) ?? null;
      if (!distribution || !(await rc.em.findOne(Endpoint, distribution))) {
        assertValidConfiguration([{ field: 'distribution_id', message: distribution ? `Endpoint ${distribution} does not exist` : 'Required: the endpoint the resource belongs to' }]);
      }
      const candidate = { ...d.defaults, ...d.values(input, null), distribution: { id: distribution } } as unknown as E;
      await check(rc, candidate, d.fields as (keyof E)[]);
      const entity = rc.em.create(d.entity, { ...candidate, distribution } as never) as E;
      recordAudit(rc, { action: `${d.type}.created`, resource_type: d.type, resource_id: entity.id, changes: changesOf({}, snapshot(entity)) });
      await rc.em.flush();
      return entity;
    },
    async update(rc, id, input) {
      const entity = await find(rc, id);
      const before = snapshot(entity);
      const values = d.values(input, entity);
      const changed = (Object.keys(values) as (keyof E)[]).filter((k) => JSON.stringify(values[k]) !== JSON.stringify(entity[k]));
      if (changed.length === 0) return entity;
      await check(rc, { ...entity, ...values } as E, changed);
      Object.assign(entity, values);
      recordAudit(rc, { action: `${d.type}.updated`, resource_type: d.type, resource_id: entity.id, changes: changesOf(before, snapshot(entity)) });
      await rc.em.flush();
      return entity;
    },
    async setEnabled(rc, id, enabled) {
      const entity = await find(rc, id);
      if (entity.enabled === enabled) return entity;
      if (enabled) await check(rc, { ...entity, enabled } as E, ['enabled' as keyof E]);
      entity.enabled = enabled;
      recordAudit(rc, { action: `${d.type}.${enabled ? 'enabled' : 'disabled'}`, resource_type: d.type, resource_id: entity.id, changes: { enabled: { from: !enabled, to: enabled } } });
      await rc.em.flush();
      return entity;
    },
    async remove(rc, id) {
      const entity = await find(rc, id);
      recordAudit(rc, { action: `${d.type}.deleted`, resource_type: d.type, resource_id: entity.id, changes: changesOf(snapshot(entity), {}) });
      rc.em.remove(entity);
      await rc.em.flush();
    },
  };
}

/** Problems of a list of patterns, named `field[i]`. */
export function patternProblems(field: string, patterns: readonly string[], problem: (p: string) => string | null): FieldError[] {
  return patterns.flatMap((p, i) => {
    const reason = problem(p);
    return reason ? [{ field: `${field}[${i}]`, message: `"${p}" ${reason}` }] : [];
  });
}
