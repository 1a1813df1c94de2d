// What auth holds about a user (core/personal-data.ts): roles, sessions
// (device, masked address, user agent), e-mailed one-time tokens and MFA
// recovery codes. The export shows when and from what the account was used,
// never a token or code hash; the erasure deletes all of it.
import type { PersonalDataProvider } from '../core/personal-data.ts';
import { OneTimeToken, RecoveryCode, Session } from './auth.entities.ts';
import { UserRole } from './permissions/role.entity.ts';
import { verifyPasswordOrDummy } from './primitives/password.ts';
import type { RequestContext } from '../core/request-context.ts';

export const authPersonalData: PersonalDataProvider = {
  name: 'auth',

  async export(rc, userId) {
    const roles = await rc.em.find(UserRole, { user: userId }, { orderBy: { created_at: 'asc' } });
    const sessions = await rc.em.find(Session, { user: userId }, { orderBy: { created_at: 'asc' } });
    const tokens = await rc.em.find(OneTimeToken, { user: userId }, { orderBy: { created_at: 'asc' } });
    const codes = await rc.em.find(RecoveryCode, { user: userId });
    return {
      roles: roles.map((r) => ({ role: r.role.name, granted_at: r.created_at, expires_at: r.expires_at ?? null })),
      sessions: sessions.map((s) => ({
        id: s.id, device_type: s.device_type, platform: s.platform ?? null, ip_address_hint: s.ip_address_hint ?? null, user_agent: s.user_agent ?? null,
        created_at: s.created_at, last_active_at: s.last_active_at, expires_at: s.expires_at, revoked_at: s.revoked_at ?? null, revoked_reason: s.revoked_reason ?? null,
      })),
      emailed_tokens: tokens.map((t) => ({ purpose: t.purpose, created_at: t.created_at, expires_at: t.expires_at, used_at: t.used_at ?? null })),
      recovery_codes: { total: codes.length, unused: codes.filter((c) => !c.used_at).length },
    };
  },

  async erase(rc, subject) {
    const user = subject.userId;
    // Refresh tokens go with their sessions (on delete cascade).
    await rc.em.nativeDelete(Session, { user });
    await rc.em.nativeDelete(OneTimeToken, { user });
    await rc.em.nativeDelete(RecoveryCode, { user });
    await rc.em.nativeDelete(UserRole, { user });
  },
};

/** Whether `password` is the user's password (for accounts' deletion request); an account without one costs a dummy verification, so timing tells nothing. */
export async function checkAccountPassword(rc: RequestContext, userId: string, password: string): Promise<boolean> {
  const [row] = await rc.em.execute<{ password_hash: string | null; status: string }[]>('select password_hash, status from app_user where id = ?', [userId]);
  return verifyPasswordOrDummy(row && row.status !== 'deleted' ? row.password_hash : null, password);
}
