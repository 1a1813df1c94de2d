// The demo-endpoint command, run by `npm start` (scripts/dev.ts) through the
// running control plane's command socket: makes sure the working
// configuration holds the demo endpoint — found by name, created once, whose
// default origin is the control plane itself (http://127.0.0.1:<port>, a
// private address, so allow_private_network) with a cache rule for the API
// reference's assets — and that the active configuration version has it.
// With CDN_PUBLISH_MODE=auto it publishes the way the publisher does (the
// same lock, so it and a replica's turn never both publish); with manual it
// publishes explicitly, only when the demo endpoint changed or is not in the
// active version. The writes go through the CDN services (validation, audit
// entries with actor_type system). Prints the endpoint's hostname and the
// active version's number, one line each.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { cacheRuleService, createCacheRuleBody, createEndpoint, createEndpointBody, createOrigin, createOriginBody, Endpoint, findOrigin, type Origin, type OriginWriteServices, setEndpointEnabled, setOriginEnabled, systemHostLookup, updateOrigin, updateOriginBody } from '../cdn/index.ts';
import { systemClock } from '../core/clock.ts';
import { inTransaction, systemContext, type RequestContext } from '../core/request-context.ts';
import { CommandError, defineCommand } from '../db/command-channel.ts';
import { ApiError } from '../http/errors.ts';
import { createLogger } from '../http/logger.ts';
import { autoPublish, publishConfiguration, type ConfigServices } from './config-service.ts';
import { ConfigStore } from './config-store.ts';

const quiet = createLogger('silent');
/** How long the command waits for a replica's publisher turn in progress (auto mode). */
const PUBLISH_WAIT_MS = 30_000;

export const demoEndpointArgs = z.strictObject({
  /** The endpoint's name: how later runs find it. */
  name: z.string().trim().min(1).max(100).default('demo'),
  /** The control plane's HTTP port: the origin. */
  origin_port: z.number().int().min(1).max(65535),
});

const ORIGIN_HOST = '127.0.0.1';
/** What the origin must be; a later start on another --port moves it there. */
const originSettings = (port: number) => ({ scheme: 'http', host: ORIGIN_HOST, port, allow_private_network: true } as const);
const isSet = (o: Origin, port: number) => Object.entries(originSettings(port)).every(([k, v]) => o[k as keyof Origin] === v);

/** Finds or creates the demo endpoint (in `tx`); whether anything changed. */
async function ensureDemo(app: OriginWriteServices, tx: RequestContext, name: string, port: number): Promise<{ endpoint: Endpoint; changed: boolean }> {
  const [existing] = await tx.em.find(Endpoint, { name }, { orderBy: { created_at: 'asc', id: 'asc' }, limit: 1 });
  if (!existing) {
    const origin = await createOrigin(app, tx, createOriginBody.parse({ name: `${name} origin (this control plane)`, ...originSettings(port) }), null);
    const endpoint = await createEndpoint(tx, createEndpointBody.parse({ name, default_origin_id: origin.id, tags: ['npm-start'] }), app.config.CDN_DOMAIN);
    await cacheRuleService.create(tx, createCacheRuleBody.parse({ name: 'API reference assets', match: { paths: ['/docs/*'] }, ttl_seconds: 300 }), endpoint.id);
    return { endpoint, changed: true };
  }
  let changed = false;
  const origin = await findOrigin(tx, existing.default_origin_id);
  if (!isSet(origin, port)) {
    await updateOrigin(app, tx, origin.id, updateOriginBody.parse(originSettings(port)));
    changed = true;
  }
  if (!origin.enabled) {
    await setOriginEnabled(tx, origin.id, true);
    changed = true;
  }
  if (existing.status === 'disabled') {
    await setEndpointEnabled(tx, existing.id, true);
    changed = true;
  }
  return { endpoint: existing, changed };
}

/** Auto mode: publishes as a publisher turn does, waiting out a turn in progress elsewhere. */
async function publishAuto(app: ConfigServices): Promise<void> {
  const deadline = Date.now() + PUBLISH_WAIT_MS;
  for (;;) {
    const outcome = await autoPublish(app);
    if (outcome === 'invalid') {
      throw new CommandError('the working configuration is invalid, so it was not published: see POST /v1/cdn/config/validate');
    }
    if (outcome !== 'busy') return;
    if (Date.now() > deadline) throw new CommandError('another publish held the configuration lock for too long; try again');
    await sleep(100);
  }
}

export const demoEndpointCommand = defineCommand({
  name: 'edge:demo-endpoint',
  args: demoEndpointArgs,
  async run({ db, io, services }, args) {
    if (!services) throw new CommandError('needs the platform services (run it through runCommand)');
    const { config } = services;
    const secretBox = await services.secretBox();
    const rc = systemContext({ db, log: quiet }, { requestId: `cli-${randomUUID()}` });
    const app: ConfigServices = {
      db, log: quiet, clock: systemClock, config, secretBox,
      edgeConfig: new ConfigStore({ db, secretBox, log: quiet }),
      store: { publish: async (channel, message) => void (await services.publish(channel, message)) },
    };
    try {
      const { endpoint, changed } = await inTransaction(rc, (tx) => ensureDemo({ cdnHostLookup: systemHostLookup, config }, tx, args.name, args.origin_port));
      if (config.CDN_PUBLISH_MODE === 'auto') await publishAuto(app);
      else if (changed || !(await app.edgeConfig.active())?.manifest.has(`endpoint/${endpoint.id}`)) {
        await publishConfiguration(app, rc, 'npm start: the demo endpoint');
      }
      const active = await app.edgeConfig.active();
      if (!active?.manifest.has(`endpoint/${endpoint.id}`)) throw new CommandError('the demo endpoint is not in the active configuration version');
      io.out(`Demo endpoint ${endpoint.id}: hostname ${endpoint.hostname}${changed ? ' (written now)' : ''}`);
      io.out(`Active configuration version: ${active.version}`);
    } catch (error) {
      if (error instanceof ApiError) {
        const fields = error.errors?.map((e) => `${e.field}: ${e.message}`).join('; ');
        throw new CommandError(fields ? `${error.message}: ${fields}` : error.message);
      }
      throw error;
    }
  },
});
