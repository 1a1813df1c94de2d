// What the endpoint-scoped resources (signing keys, IP access rules; document
// 3 §4.8, §4.9) share: their path parameters, the look-up of one of them
// under its endpoint (404 unless the endpoint holds it), and their lists.
import type { EntityName } from '@mikro-orm/core';
import { z } from 'zod';
import type { RequestContext } from '../core/request-context.ts';
import { found } from '../http/errors.ts';
import type { PageMeta } from '../http/paging.ts';
import { uuid } from '../http/schemas.ts';
import { findEndpoint } from './endpoint-service.ts';
import { listResources } from './fields.ts';

export const endpointParams = z.strictObject({ id: uuid().describe('The endpoint (distribution) id') });
export const endpointChildParams = <K extends string>(key: K) =>
  z.strictObject({ id: uuid().describe('The endpoint id'), [key]: uuid() } as { id: ReturnType<typeof uuid> } & Record<K, ReturnType<typeof uuid>>);

/** The resource `id` of endpoint `endpointId`; 404 when either is missing or it belongs to another endpoint. */
export async function findEndpointChild<T extends object>(rc: RequestContext, entity: EntityName<T>, endpointId: string, id: string, what: string): Promise<T> {
  return found(await rc.em.findOne(entity, { id, endpoint: endpointId } as never), what) as T;
}

/** One page of an endpoint's resources (404 for an unknown endpoint). */
export async function listEndpointChildren<T extends object>(
  rc: RequestContext, entity: EntityName<T>, endpointId: string, where: Record<string, unknown>,
  options: { cursor?: string; limit: number }, sort: { field: string; direction: 'asc' | 'desc' },
): Promise<{ items: T[]; meta: PageMeta }> {
  await findEndpoint(rc, endpointId);
  return listResources(rc, entity, { ...where, endpoint: endpointId }, { ...options, sort });
}
