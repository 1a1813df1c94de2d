// Administration of users (document 1 §4.6): suspension, reinstatement,
// status and role changes, each audit-logged with the acting admin.
import type { EntityManager } from '@mikro-orm/postgresql';
import { User } from '../accounts/index.ts';
import { recordAudit } from '../audit/audit.ts';
import { assignRole, type AuthServices, loadUserGrants, removeRole, requireActor } from '../auth/index.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, found } from '../http/errors.ts';
import { matchPermission } from '../permissions/catalog.ts';
import { suspensionNotice } from '../mail/templates.ts';
import { notify } from '../notifications/index.ts';

/** Superadmins are touched (suspended, re-roled) only by superadmins. */
async function assertMayManage(rc: RequestContext, target: User): Promise<void> {
  const caller = requireActor(rc);
  const targetGrants = await loadUserGrants(rc.em, target.id);
  if (targetGrants.roles.includes('superadmin') && !(await isSuperadmin(rc.em, caller.id))) {
    throw new ApiError('FORBIDDEN', 'Only a superadmin can change a superadmin');
  }
}

/** Superadmin scope: a permission only the superadmin role's wildcard grants. */
async function isSuperadmin(em: EntityManager, userId: string): Promise<boolean> {
  const { grants } = await loadUserGrants(em, userId);
  return matchPermission(grants, { permission: 'users.grant_superadmin' }) === 'global';
}

export async function findUser(em: EntityManager, userId: string): Promise<User> {
  return found(await em.findOne(User, userId), 'User');
}

export async function suspendUser(app: AuthServices, rc: RequestContext, userId: string, input: { reason: string | null; notify_user: boolean }): Promise<User> {
  const user = await inTransaction(rc, async (tx) => {
    const target = await findUser(tx.em, userId);
    if (target.id === requireActor(tx).id) throw new ApiError('CONFLICT', 'You cannot suspend your own account');
    if (target.status === 'deleted') throw new ApiError('CONFLICT', 'The account is deleted');
    await assertMayManage(tx, target);
    const previous = target.status;
    target.status = 'suspended';
    target.suspended_reason = input.reason;
    recordAudit(tx, {
      action: 'user.suspended', resource_type: 'user', resource_id: target.id, reason: input.reason,
      changes: { status: { from: previous, to: 'suspended' } }, metadata: { notify_user: input.notify_user },
    });
    if (input.notify_user) {
      // In the app (seen once reinstated) and by e-mail after the response; committed with the suspension.
      const reason = input.reason ?? 'Not stated';
      await notify(app, tx, {
        userId: target.id, type: 'account_suspended', priority: 'high',
        title: 'Your account has been suspended',
        body: `Your account has been suspended. You cannot sign in or stream until it is reinstated. Reason: ${reason}`,
        email: suspensionNotice({ reason, displayName: target.display_name ?? undefined }),
      });
    }
    await tx.em.flush();
    // Sessions end and their access tokens are refused from this moment.
    await app.sessions.revokeAll(tx.em, target.id, 'suspended');
    return target;
  });
  return user;
}

export async function reinstateUser(rc: RequestContext, userId: string, note: string | null): Promise<User> {
  return inTransaction(rc, async (tx) => {
    const user = await findUser(tx.em, userId);
    if (user.status !== 'suspended') throw new ApiError('CONFLICT', 'Only a suspended account can be reinstated');
    await assertMayManage(tx, user);
    user.status = user.email_verified ? 'active' : 'pending_verification';
    user.suspended_reason = null;
    recordAudit(tx, { action: 'user.reinstated', resource_type: 'user', resource_id: user.id, reason: note, changes: { status: { from: 'suspended', to: user.status } } });
    await tx.em.flush();
    return user;
  });
}

const ASSIGNABLE = ['subscriber', 'partner', 'admin', 'superadmin'] as const;

export async function updateUser(app: AuthServices, rc: RequestContext, userId: string, input: { status?: 'active' | 'suspended'; roles?: string[] }): Promise<User> {
  const actor = requireActor(rc);
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    let user = await findUser(em, userId);
    await assertMayManage(tx, user);
    if (input.roles) {
      const current = (await loadUserGrants(em, user.id)).roles;
      const wanted = new Set(input.roles);
      const touchesSuperadmin = wanted.has('superadmin') !== current.includes('superadmin');
      if (touchesSuperadmin && !(await isSuperadmin(em, actor.id))) {
        throw new ApiError('FORBIDDEN', 'Granting or removing superadmin needs superadmin scope');
      }
      if (user.id === actor.id && current.some((r) => (r === 'admin' || r === 'superadmin') && !wanted.has(r))) {
        throw new ApiError('CONFLICT', 'You cannot remove your own administrator role');
      }
      // Only the account roles listed in document 1 are managed here; CDN roles are kept.
      let changed = false;
      for (const role of ASSIGNABLE) {
        if (wanted.has(role) && !current.includes(role)) await assignRole(em, user.id, role, { grantedBy: actor.id });
        else if (!wanted.has(role) && current.includes(role)) await removeRole(em, user.id, role);
        else continue;
        changed = true;
      }
      // The record shows its roles: a change moves its version (ETag) and updated_at, though the roles live in user_role.
      if (changed) user.updated_at = new Date();
      recordAudit(tx, { action: 'user.roles_changed', resource_type: 'user', resource_id: user.id, changes: { roles: { from: current, to: [...wanted].sort() } } });
    }
    if (input.status && input.status !== user.status) {
      if (input.status === 'suspended') {
        user = await suspendUser(app, tx, user.id, { reason: null, notify_user: false });
      } else {
        if (user.status !== 'suspended') throw new ApiError('CONFLICT', `Cannot move an account from ${user.status} to active`);
        user = await reinstateUser(tx, user.id, null);
      }
    }
    recordAudit(tx, { action: 'user.updated', resource_type: 'user', resource_id: user.id, metadata: { fields: Object.keys(input) } });
    await em.flush();
    // Role changes apply to the next token; permissions are read from storage on every request anyway.
    return user;
  });
}
