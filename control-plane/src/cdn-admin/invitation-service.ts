// Accepting an invitation (DESIGN.md §5): the e-mailed one-time token and a
// new password make the invited account active with that password, and end
// every session opened before (an existing account invited because its owner
// had not confirmed it may hold a squatter's). The token is stored hashed,
// works once (a conditional update spends it) and expires after 7 days; a
// deactivated invitee cannot accept (403) and keeps the link unspent for
// after a reactivation. Audit-logged with the invitee as actor.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { User } from '../accounts/index.ts';
import { recordAudit } from '../audit/audit.ts';
import { type AuthServices, findLiveOneTimeToken, hashPassword, type OneTimeToken, spendOneTimeToken } from '../auth/index.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, validationError } from '../http/errors.ts';

export async function acceptInvitation(app: AuthServices, rc: RequestContext, input: { token: string; new_password: string }): Promise<void> {
  // The token is checked before the password is hashed (argon2 costs ~130 ms: no work for a bad link),
  // and again, spent, in the transaction that sets the password.
  await usableInvitation(app, rc.em, input.token);
  const passwordHash = await hashPassword(input.new_password);
  await inTransaction(rc, async (tx) => {
    const record = await usableInvitation(app, tx.em, input.token);
    const user = record.user as unknown as User;
    await spendOneTimeToken(tx.em, record);
    user.password_hash = passwordHash;
    user.password_confirmed = true;
    // The link reached the address: it is verified as a verification link would.
    user.email_verified = true;
    if (user.status === 'pending_verification') user.status = 'active';
    // Sessions opened before the owner set this password are not the owner's to keep (a registration by someone else).
    await app.sessions.revokeAll(tx.em, user.id, 'invitation_accepted');
    tx.actor = { type: 'user', id: user.id, roles: [] };
    recordAudit(tx, { action: 'admin_user.invitation_accepted', resource_type: 'admin_user', resource_id: user.id, changes: { status: { from: 'invited', to: 'active' } } });
    await tx.em.flush();
  });
}

/** A live invitation token of an account that may accept it. */
async function usableInvitation(app: AuthServices, em: EntityManager, token: string): Promise<OneTimeToken> {
  const record = await findLiveOneTimeToken(app, em, token, 'invitation');
  const user = record.user as unknown as User;
  if (user.status === 'deleted') throw validationError([{ field: 'token', message: 'Invalid or expired token' }]);
  if (user.status === 'suspended') throw new ApiError('ACCOUNT_SUSPENDED', 'This account is deactivated; ask an administrator to reactivate it');
  return record;
}
