// A fixture resource for testing the shared HTTP conventions through the real
// server: paging, idempotency, ETag/If-Match, validation and rate limits.
import { defineEntity, p } from '@mikro-orm/core';
import { z } from 'zod';
import type { Database } from '../../control-plane/src/db/orm.ts';
import { ApiError, found } from '../../control-plane/src/http/errors.ts';
import { paginate } from '../../control-plane/src/http/paging.ts';
import { data, page, reply, routesFor, versioned } from '../../control-plane/src/http/route.ts';
import { pageQuery, sortParam, timestamp, uuid } from '../../control-plane/src/http/schemas.ts';

const defineRoute = routesFor();

export const WidgetSchema = defineEntity({
  name: 'Widget',
  tableName: 'test_widget',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(20),
    size: p.integer(),
    created_at: p.datetime().onCreate(() => new Date()),
    version: p.integer().version(),
  },
});
export class Widget extends WidgetSchema.class {}
WidgetSchema.setClass(Widget);

export async function createWidgetTable(db: Database): Promise<void> {
  await db.orm.em.fork().execute(`
    create table if not exists test_widget (
      id uuid primary key, name varchar(20) not null, size int not null,
      created_at timestamptz not null, version int not null default 1)`);
  await db.orm.em.fork().execute(`create table if not exists test_widget_runs (n serial primary key)`);
}

// The record is the presenter: the entity goes in, the JSON comes out.
const widgetRecord = z.object({ id: z.uuid(), name: z.string(), size: z.number(), created_at: timestamp(), version: z.number() });
const widget = versioned(widgetRecord);
const widgetBody = z.strictObject({
  name: z.string().min(1).max(20).regex(/^[a-z0-9-]+$/, 'Must be lowercase letters, digits or dashes'),
  size: z.number().int().min(1).max(10).default(1),
});

export const widgetRoutes = [
  defineRoute({
    method: 'post', path: '/v1/test/widgets', summary: 'Create a widget', tags: ['test'], access: 'public',
    body: widgetBody, idempotent: true, responses: { 201: data(widget) },
    async handler({ body, rc: { em } }) {
      // Record every execution, so tests can prove an action ran exactly once.
      await em.execute('insert into test_widget_runs default values');
      // Slow enough that concurrent duplicates overlap.
      await new Promise((r) => setTimeout(r, 50));
      const created = em.create(Widget, { name: body.name, size: body.size } as never);
      await em.flush();
      return reply.created(created, `/v1/test/widgets/${created.id}`);
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/widgets', summary: 'List widgets', tags: ['test'], access: 'public',
    query: pageQuery({ sort: sortParam(['name', 'created_at', 'size'], 'created_at'), name: z.string().max(20).optional() }),
    responses: { 200: page(widget) },
    async handler({ query, rc: { em } }) {
      return paginate(em, Widget, { where: query.name ? { name: query.name } : {}, limit: query.limit, cursor: query.cursor, sort: query.sort });
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/widgets/:id', summary: 'Read a widget', tags: ['test'], access: 'public',
    params: z.strictObject({ id: uuid() }), responses: { 200: data(widget) },
    async handler({ params, rc: { em } }) {
      return found(await em.findOne(Widget, params.id), 'Widget');
    },
  }),
  defineRoute({
    method: 'patch', path: '/v1/test/widgets/:id', summary: 'Update a widget', tags: ['test'], access: 'public',
    params: z.strictObject({ id: uuid() }), body: widgetBody.partial(),
    ifMatch: async ({ params, rc: { em } }) => found(await em.findOne(Widget, params.id), 'Widget'),
    responses: { 200: data(widget) },
    async handler({ params, body, rc: { em } }) {
      const current = found(await em.findOne(Widget, params.id), 'Widget');
      em.assign(current, body);
      await em.flush();
      return current;
    },
  }),
  defineRoute({
    method: 'patch', path: '/v1/test/widgets/:id/contended', summary: 'Rename a widget that a concurrent writer keeps changing', tags: ['test'], access: 'public',
    params: z.strictObject({ id: uuid() }), body: z.strictObject({ name: widgetBody.shape.name, interfere_below: z.number().int().min(1).max(10) }),
    ifMatch: async ({ params, rc: { em } }) => found(await em.findOne(Widget, params.id), 'Widget'),
    responses: { 200: data(widget) },
    async handler({ params, body, rc: { em } }) {
      const current = found(await em.findOne(Widget, params.id), 'Widget');
      // Another writer changes the record between this run's read and its update while its size is below
      // interfere_below (each interference adds 1): the update's version check then fails.
      if (current.size < body.interfere_below) await em.getConnection().execute('update test_widget set size = size + 1, version = version + 1 where id = ?', [current.id]);
      current.name = body.name;
      await em.flush();
      return current;
    },
  }),
  defineRoute({
    method: 'post', path: '/v1/test/declined', summary: 'An action that always ends in 402', tags: ['test'], access: 'public',
    body: z.strictObject({ amount: z.number().int().min(1) }), idempotent: true, responses: { 200: data(z.object({ ok: z.boolean() })) },
    errors: ['PAYMENT_FAILED'],
    async handler({ rc: { em } }) {
      await em.execute('insert into test_widget_runs default values');
      throw new ApiError('PAYMENT_FAILED', 'Card declined');
    },
  }),
  defineRoute({
    method: 'post', path: '/v1/test/limited', summary: 'Rate-limited action', tags: ['test'], access: 'public',
    rateLimits: [{ name: 'test-limited', limit: 3, windowSeconds: 60, by: 'ip' }],
    responses: { 200: data(z.object({ ok: z.boolean() })) },
    async handler() {
      return { ok: true };
    },
  }),
];
