// The auth capability: registration, login, sessions, tokens, MFA, the
// role tables and the guard every route goes through. It adds tokens and
// sessions to the platform's services and provides the access control.
import type { CoreServices } from '../core/services.ts';
import { TokenAccessControl } from './access-control.ts';
import { JwtSigningKey, OneTimeToken, RecoveryCode, RefreshToken, Session } from './auth.entities.ts';
import { syncRoleCatalog } from './permissions/permission-service.ts';
import { Role, RolePermission, UserRole } from './permissions/role.entity.ts';
import { authRoutes } from './routes.ts';
import { SessionService } from './session-service.ts';
import { TokenService } from './token-service.ts';

export type { AuthServices } from './services.ts';

export const auth = {
  name: 'auth',
  entities: [Role, RolePermission, UserRole, Session, RefreshToken, OneTimeToken, RecoveryCode, JwtSigningKey],
  routes: authRoutes,
  async start(core: CoreServices) {
    // The role tables follow the catalog in code (every replica agrees).
    await syncRoleCatalog(core.db.orm.em.fork());
    const tokens = await TokenService.create({ em: core.db.orm.em.fork(), store: core.store, box: core.secretBox, issuer: core.config.publicUrl, now: () => core.clock.now().getTime() });
    const sessions = new SessionService(core.tokenPepper, tokens);
    return {
      services: { tokens, sessions },
      access: new TokenAccessControl(tokens, core.db),
      close: () => tokens.close(),
    };
  },
};
