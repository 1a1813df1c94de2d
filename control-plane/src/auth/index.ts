// The auth capability: registration, login, sessions, tokens, MFA, the
// role tables and the guard every route goes through. It adds tokens and
// sessions to the platform's services, provides the access control, and
// issues and checks the profile tokens of PIN-protected profiles.
import type { RequestContext } from '../core/request-context.ts';
import type { CoreServices } from '../core/services.ts';
import { TokenAccessControl } from './access-control.ts';
import { JwtSigningKey, OneTimeToken, RecoveryCode, RefreshToken, Session } from './auth.entities.ts';
import { authPersonalData, checkAccountPassword } from './personal-data.ts';
import { syncRoleCatalog } from './permissions/permission-service.ts';
import { Role, RolePermission, UserRole } from './permissions/role.entity.ts';
import { profileTokenRoutes } from './profile-token-routes.ts';
import { requireProfileToken } from './profile-tokens.ts';
import { requireStepUp } from './mfa-service.ts';
import { sessionActivity } from './session-activity.ts';
import { authRoutes } from './routes.ts';
import type { AuthServices } from './services.ts';
import { SessionService } from './session-service.ts';
import { TokenService } from './token-service.ts';

export type { AuthServices } from './services.ts';

export const auth = {
  name: 'auth',
  entities: [Role, RolePermission, UserRole, Session, RefreshToken, OneTimeToken, RecoveryCode, JwtSigningKey],
  routes: [...authRoutes, ...profileTokenRoutes],
  personalData: authPersonalData,
  async start(core: CoreServices) {
    // The role tables follow the catalog in code (every replica agrees).
    await syncRoleCatalog(core.db.orm.em.fork());
    const tokens = await TokenService.create({ em: core.db.orm.em.fork(), store: core.store, box: core.secretBox, issuer: core.config.publicUrl, now: () => core.clock.now().getTime() });
    const sessions = new SessionService(core.tokenPepper, tokens);
    const services: AuthServices = { ...core, tokens, sessions };
    return {
      // Accounts asks for proof of a PIN-protected profile's PIN through this (accounts/services.ts).
      // Accounts checks the password or step-up token of a deletion request through checkPassword and requireStepUp.
      services: {
        tokens, sessions, requireProfileToken: (rc: RequestContext, profileId: string) => requireProfileToken(services, rc, profileId), checkPassword: checkAccountPassword,
        requireStepUp: (rc: RequestContext, token: string) => requireStepUp(services, rc, token),
      },
      // API tokens are resolved by a later capability's `resolveApiToken` service (looked up per request on the shared services).
      access: new TokenAccessControl(tokens, core.db, core as AuthServices, sessionActivity(core)),
      close: () => tokens.close(),
    };
  },
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { type ApiTokenResolver, requireActor } from './access-control.ts';
export { findLiveOneTimeToken, issueOneTimeToken, normalizeEmail, ownedByItsOwner, spendOneTimeToken } from './auth-service.ts';
export { type OneTimeToken } from './auth.entities.ts';
export { activeRolesByUser, assignRole, loadUserGrants, removeRole, syncRoleCatalog } from './permissions/permission-service.ts';
export { hashPassword, newPasswordSchema, passwordSchema } from './primitives/password.ts';
export { emailField, messageRecord } from './schemas.ts';
export { defineAuthRoute } from './services.ts';
