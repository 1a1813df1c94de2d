// The CDN administration capability (document 3 §4.11; DESIGN.md §5, §6):
// CDN admin users (platform users holding a CDN role, invited by e-mail),
// machine API tokens and the CDN audit log, under /v1/cdn. Its start hook
// provides the resolver the guard uses for `Authorization: Bearer cdn_...`.
import type { AuthServices } from '../auth/index.ts';
import { adminUserRoutes } from './admin-user-routes.ts';
import { ApiToken } from './api-token.entity.ts';
import { apiTokenRoutes } from './api-token-routes.ts';
import { ApiTokenCache } from './api-token-cache.ts';
import { apiTokenResolver, type TokenRow } from './api-token-service.ts';
import { auditLogRoutes } from './audit-log-routes.ts';
import { acceptInvitationRoute } from './invitation-routes.ts';

export const cdnAdmin = {
  name: 'cdnAdmin',
  entities: [ApiToken],
  routes: [...adminUserRoutes, acceptInvitationRoute, ...apiTokenRoutes, ...auditLogRoutes],
  async start(app: AuthServices) {
    const cache = await ApiTokenCache.start<TokenRow>(app.db, app.log);
    return { services: { resolveApiToken: apiTokenResolver(app, cache) }, close: () => cache.close() };
  },
};
