// The configuration versions capability (document 3 §3, §4.12; DESIGN.md §5):
// the working configuration (the CDN capability's tables) compiled into
// content-addressed resources, validated, published, rolled back and
// restored, published automatically in CDN_PUBLISH_MODE=auto, and the
// ConfigSource the control channel pushes from. It builds on the CDN
// capability: its tables through cdn/snapshot-fields.ts, its validation, and
// its restore for a rollback (cdn/snapshot-restore.ts). How far a version has
// reached it reads from the FleetView the control channel (edge-channel)
// adds to the services when it starts; it imports nothing of the channel.
import { configEntities } from './config-entities.ts';
import { configRoutes } from './config-routes.ts';
import { startConfig } from './config-start.ts';
import type { CdnConfigServices } from './services.ts';

export type { CdnConfigServices } from './services.ts';
export { CONFIG_PUBLISHED_CHANNEL, type ConfigSource, type FleetView, type Manifest, type ManifestEntry, type PropagationCounts, type PublishedVersion } from './contracts.ts';
export { compileConfiguration } from './config-compiler.ts';
export { demoEndpointCommand } from './demo-endpoint-command.ts';

export const cdnConfig = {
  name: 'cdn-config',
  entities: configEntities,
  routes: configRoutes,
  async start(services: CdnConfigServices) {
    return startConfig(services);
  },
};
