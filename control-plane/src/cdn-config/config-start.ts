// Starts the configuration versions capability: the ConfigSource the
// channel reads (services.edgeConfig) and, with CDN_PUBLISH_MODE=auto, the
// loop that publishes configuration writes (DESIGN.md §5). Every replica
// looks at the revision counter every CDN_PUBLISH_POLL_MS (one cheap row
// read); when it moved past the last compile, autoPublish takes the
// configuration lock, so one replica compiles and the others skip. Bursts of
// writes coalesce into one version; a write that changes nothing the edge
// sees publishes nothing. The loop never stops on a database error: it logs
// and tries again at its next turn. close() stops it and waits for a turn in
// progress.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Registry } from 'prom-client';
import { queryGauge } from '../core/query-gauge.ts';
import type { CdnConfigServices } from './services.ts';
import { ConfigStore } from './config-store.ts';
import { autoPublish, readRevision, type ConfigServices } from './config-service.ts';

export async function startConfig(services: Omit<ConfigServices, 'edgeConfig'> & Partial<Pick<CdnConfigServices, 'edgeConfig'>>) {
  const edgeConfig = new ConfigStore(services);
  const app = services as ConfigServices;
  const log = services.log.child({ component: 'config-publisher' });
  // The version agents should be on, beside theirs (edge_config_version): a publish no agent takes shows as a gap.
  const activeVersion = queryGauge({
    name: 'edge_config_active_version', help: 'The configuration version active on the platform (0 before the first publish)',
    labelNames: [], declared: [{}], log,
    load: async () => [{ labels: {}, value: (await edgeConfig.active())?.version ?? 0 }],
  });
  const metrics = (registry: Registry) => registry.registerMetric(activeVersion);
  if (services.config.CDN_PUBLISH_MODE !== 'auto') return { services: { edgeConfig }, metrics, close: async () => {} };

  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let turn: Promise<void> | undefined;
  let failures = 0;
  const schedule = () => {
    if (!stopped) timer = setTimeout(() => void (turn = runTurn()), services.config.CDN_PUBLISH_POLL_MS);
  };
  const runTurn = async () => {
    try {
      const { revision, compiled } = await readRevision(services.db.orm.em.fork() as EntityManager);
      if (revision !== compiled) {
        const outcome = await autoPublish(app);
        if (outcome === 'published') log.info('published the configuration changes');
      }
      if (failures) log.info({ failures }, 'the configuration publisher works again');
      failures = 0;
    } catch (error) {
      // The first failure of a run is a warning; the rest are quiet until it recovers.
      if (failures++ === 0) log.warn({ err: error }, 'the configuration publisher failed; retrying');
    } finally {
      schedule();
    }
  };
  schedule();

  return {
    services: { edgeConfig },
    metrics,
    async close() {
      stopped = true;
      clearTimeout(timer);
      await turn;
    },
  };
}
