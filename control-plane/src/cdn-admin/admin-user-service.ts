// CDN admin users (document 3 §2, §3, §4.11; DESIGN.md §5): platform users
// holding a CDN role. Creating one invites a new account by e-mail (its link
// sets the password) or grants the role to an existing account; the role can
// change; deactivation is the account's suspension (sessions end at once,
// login refused) and reactivation its reinstatement. Only a superadmin touches
// superadmins; nobody changes their own role or deactivates themselves, and
// the last active superadmin stays. Every write is audit-logged as
// `admin_user.*`.
import { raw, UniqueConstraintViolationException } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { createAccount, User, userSearchDocument } from '../accounts/index.ts';
import { reinstateUser, suspendUser } from '../admin/index.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { assignRole, type AuthServices, issueOneTimeToken, loadUserGrants, normalizeEmail, ownedByItsOwner, removeRole } from '../auth/index.ts';
import { DAY } from '../core/clock.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, conflict, forbidden, found } from '../http/errors.ts';
import { paginate, type Sort } from '../http/paging.ts';
import { deliver } from '../mail/deliver.ts';
import { cdnAdminInvitation } from '../mail/templates.ts';
import { notify } from '../notifications/index.ts';
import { ADMIN_USER_STATUSES, adminUserStatus, type CreateAdminUserInput, type UpdateAdminUserInput } from './admin-user-record.ts';
import { CDN_ROLES, cdnRank, cdnRankSql, cdnRoleOf, type CdnRole } from './cdn-roles.ts';

/** How long an invitation link works. */
export const INVITATION_TTL_MS = 7 * DAY;

/** A CDN admin user as the record presents it: the account and its current roles. */
export interface AdminUser {
  user: User;
  roles: string[];
}


/** People manage people: API tokens may read admin users but not create, change or deactivate them. */
function requirePerson(rc: RequestContext): { id: string; roles: string[]; record?: Readonly<Record<string, unknown>> } {
  const actor = rc.actor;
  if (actor?.type !== 'user') throw forbidden('Admin users are managed by signed-in administrators, not by API tokens');
  return actor;
}

/** Superadmin scope: the guard has just read the caller's roles from storage. */
const isSuperadmin = (rc: RequestContext) => rc.actor?.type === 'user' && rc.actor.roles.includes('superadmin');

const onlySuperadmin = (what: string) => forbidden(`Only a superadmin can ${what}`);

/** A user that is a CDN admin user (holds a CDN role, not deleted), with its roles; 404 otherwise. */
export async function findAdminUser(em: EntityManager, id: string): Promise<AdminUser> {
  const user = found(await em.findOne(User, { id, status: { $ne: 'deleted' } }), 'Admin user');
  const { roles } = await loadUserGrants(em, user.id);
  found(cdnRoleOf(roles), 'Admin user');
  return { user, roles };
}

export interface AdminUserQuery {
  cursor?: string;
  limit: number;
  sort: Sort;
  q?: string;
  role?: CdnRole;
  status?: (typeof ADMIN_USER_STATUSES)[number];
}

export async function listAdminUsers(rc: RequestContext, query: AdminUserQuery) {
  const em = rc.em;
  // The statuses as adminUserStatus derives them.
  const where: Record<string | symbol, unknown> = query.status === 'deactivated' ? { status: 'suspended' }
    : query.status === 'active' ? { status: 'active', password_hash: { $ne: null } }
    : query.status === 'invited' ? { $or: [{ status: 'pending_verification' }, { status: 'active', password_hash: null }] }
    : { status: { $ne: 'deleted' } };
  // Holders of a CDN role, or of exactly this one as their most privileged.
  const rank = raw<symbol>((alias) => `${cdnRankSql(alias)} ${query.role ? '= ?' : '> 0'}`, query.role ? [cdnRank(query.role)] : []);
  where[rank] = [];
  if (query.q) {
    // Full text over name and address, as GET /v1/admin/users (served by app_user_search_idx).
    where[raw<symbol>((alias) => `${userSearchDocument(alias)} @@ websearch_to_tsquery('simple', ?)`, [query.q])] = [];
  }
  const page = await paginate(em, User, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
  const roles = await rolesOf(em, page.items.map((u) => u.id));
  return { items: page.items.map((user) => ({ user, roles: roles.get(user.id) ?? [] })), meta: page.meta };
}

async function rolesOf(em: EntityManager, userIds: string[]): Promise<Map<string, string[]>> {
  const result = new Map<string, string[]>(userIds.map((id) => [id, []]));
  if (!userIds.length) return result;
  const rows = await em.execute<{ user_id: string; role_name: string }[]>(
    `select user_id, role_name from user_role where user_id in (?) and role_name in (?) and (expires_at is null or expires_at > now())`,
    [userIds, [...CDN_ROLES]]);
  for (const row of rows) result.get(row.user_id)?.push(row.role_name);
  return result;
}

/** The inviter as the e-mail names them: display name, else address. */
const inviterName = (rc: RequestContext) =>
  (rc.actor?.record?.display_name as string | null | undefined) ?? (rc.actor?.record?.email as string | undefined);

/**
 * Creates a CDN admin user. A new address gets an account (no password,
 * pending until the invitation is accepted) holding the role and
 * `subscriber` (so the person can manage their own password, MFA and
 * sessions), and an invitation e-mail whose link sets the password (valid 7
 * days, once). An address whose account its owner holds (confirmed, with a
 * password its owner chose or confirmed: ownedByItsOwner) gets the role
 * granted and a notice instead (the administrator may read accounts anyway).
 * Any other existing account (registered but never confirmed, confirmed
 * with the link alone, or without a password) is invited like a
 * new address: its password is removed and every session ends, so whoever
 * registered the address cannot use the role, and the invitation's link sets
 * the owner's password. One that is already a CDN admin user is a 409. The
 * e-mail leaves after the commit.
 */
export async function createAdminUser(app: AuthServices, rc: RequestContext, input: CreateAdminUserInput): Promise<AdminUser> {
  const actor = requirePerson(rc);
  if (input.role === 'superadmin' && !isSuperadmin(rc)) throw onlySuperadmin('grant the superadmin role');
  const email = normalizeEmail(input.email);
  let invitation: string | null = null;
  let created: AdminUser;
  try {
    created = await inTransaction(rc, async (tx) => {
      const em = tx.em;
      const existing = await em.findOne(User, { email });
      if (existing && existing.status !== 'deleted') {
        const { roles } = await loadUserGrants(em, existing.id);
        if (cdnRoleOf(roles)) throw conflict('This address already belongs to a CDN admin user');
        if (!ownedByItsOwner(existing)) {
          // Perhaps registered by someone else (account pre-hijacking): the owner proves the mailbox and sets the password.
          existing.password_hash = null;
          existing.password_confirmed = false;
          existing.updated_at = new Date();
          await app.sessions.revokeAll(em, existing.id, 'cdn_invitation');
          await assignRole(em, existing.id, input.role, { grantedBy: actor.id });
          await assignRole(em, existing.id, 'subscriber', { grantedBy: actor.id });
          invitation = await issueOneTimeToken(app, em, existing, 'invitation', INVITATION_TTL_MS);
          recordAudit(tx, {
            action: 'admin_user.created', resource_type: 'admin_user', resource_id: existing.id,
            changes: { role: { from: null, to: input.role } }, metadata: { existing_account: true, invited: true },
          });
          await em.flush();
          return { user: existing, roles: [...new Set([...roles, input.role, 'subscriber'])] };
        }
        await assignRole(em, existing.id, input.role, { grantedBy: actor.id });
        existing.updated_at = new Date(); // the record changed: its version (ETag) moves
        recordAudit(tx, {
          action: 'admin_user.created', resource_type: 'admin_user', resource_id: existing.id,
          changes: { role: { from: null, to: input.role } }, metadata: { existing_account: true },
        });
        await notify(app, tx, {
          userId: existing.id, type: 'cdn_role_granted', priority: 'high',
          title: 'You have been given access to the CDN console',
          body: `Your account now holds the CDN role "${input.role}". Sign in with your usual password. If you did not expect this, contact your administrator.`,
        });
        await em.flush();
        return { user: existing, roles: [...roles, input.role] };
      }
      const user = await createAccount(em, { email, display_name: input.display_name, status: 'pending_verification', email_verified: false }, null);
      await assignRole(em, user.id, input.role, { grantedBy: actor.id });
      await assignRole(em, user.id, 'subscriber', { grantedBy: actor.id });
      invitation = await issueOneTimeToken(app, em, user, 'invitation', INVITATION_TTL_MS);
      recordAudit(tx, {
        action: 'admin_user.created', resource_type: 'admin_user', resource_id: user.id,
        changes: changesOf({}, { email, display_name: user.display_name, role: input.role }), metadata: { invited: true },
      });
      await em.flush();
      return { user, roles: [input.role, 'subscriber'] };
    });
  } catch (error) {
    // Two invitations of one new address at once: the second meets the first's account.
    if (error instanceof UniqueConstraintViolationException) throw conflict('This address already belongs to a CDN admin user');
    throw error;
  }
  if (invitation) {
    const mail = cdnAdminInvitation({ publicUrl: app.config.linkBaseUrl, token: invitation, role: input.role, invitedBy: inviterName(rc), expiresInHours: INVITATION_TTL_MS / 3_600_000 });
    app.deferred.defer('cdn-admin-invitation', () => deliver(app, email, mail), rc.log);
  }
  return created;
}

/** Active superadmins (who can act): the last one is never demoted or deactivated. */
async function activeSuperadmins(em: EntityManager): Promise<number> {
  const [row] = await em.execute<{ n: number }[]>(
    `select count(*)::int as n from user_role ur join app_user u on u.id = ur.user_id
      where ur.role_name = 'superadmin' and (ur.expires_at is null or ur.expires_at > now()) and u.status = 'active'`);
  return row!.n;
}

async function assertNotLastSuperadmin(em: EntityManager, target: AdminUser): Promise<void> {
  if (cdnRoleOf(target.roles) === 'superadmin' && target.user.status === 'active' && (await activeSuperadmins(em)) <= 1) {
    throw conflict('The last active superadmin cannot be removed');
  }
}

/** Partial update (display_name, role) under If-Match; the role replaces every CDN role the user held. */
export async function updateAdminUser(rc: RequestContext, id: string, input: UpdateAdminUserInput): Promise<AdminUser> {
  const actor = requirePerson(rc);
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    const target = await findAdminUser(em, id);
    const { user } = target;
    const before = { display_name: user.display_name, role: cdnRoleOf(target.roles) };
    const roleChanges = input.role !== undefined && input.role !== before.role;
    if (roleChanges && (before.role === 'superadmin' || input.role === 'superadmin') && !isSuperadmin(tx)) {
      throw onlySuperadmin(input.role === 'superadmin' ? 'grant the superadmin role' : 'change a superadmin\'s role');
    }
    if (!roleChanges && before.role === 'superadmin' && !isSuperadmin(tx)) throw onlySuperadmin('change a superadmin');
    if (roleChanges && user.id === actor.id) throw conflict('You cannot change your own role; ask another administrator');
    if (roleChanges) await assertNotLastSuperadmin(em, target);

    let roles = target.roles;
    if (roleChanges) {
      for (const role of CDN_ROLES) if (role !== input.role && roles.includes(role)) await removeRole(em, user.id, role);
      await assignRole(em, user.id, input.role!, { grantedBy: actor.id });
      roles = [...roles.filter((r) => !(CDN_ROLES as readonly string[]).includes(r)), input.role!];
    }
    if (input.display_name !== undefined) user.display_name = input.display_name;
    const changes = changesOf(before, { display_name: user.display_name, role: cdnRoleOf(roles) });
    if (Object.keys(changes).length === 0) return target;
    user.updated_at = new Date(); // a role change alone still moves the record's version (ETag)
    recordAudit(tx, { action: 'admin_user.updated', resource_type: 'admin_user', resource_id: user.id, changes });
    await em.flush();
    return { user, roles };
  });
}

/** Deactivation (document 3 §3): the account's suspension, so its sessions end at once and login is refused. */
export async function deactivateAdminUser(app: AuthServices, rc: RequestContext, id: string): Promise<AdminUser> {
  const actor = requirePerson(rc);
  return inTransaction(rc, async (tx) => {
    const target = await findAdminUser(tx.em, id);
    if (cdnRoleOf(target.roles) === 'superadmin' && !isSuperadmin(tx)) throw onlySuperadmin('deactivate a superadmin');
    if (target.user.id === actor.id) throw conflict('You cannot deactivate yourself');
    if (target.user.status === 'suspended') throw conflict('The admin user is already deactivated');
    await assertNotLastSuperadmin(tx.em, target);
    const from = adminUserStatus(target.user);
    const user = await suspendUser(app, tx, target.user.id, { reason: 'Deactivated as a CDN admin user', notify_user: false });
    recordAudit(tx, { action: 'admin_user.deactivated', resource_type: 'admin_user', resource_id: user.id, changes: { status: { from, to: 'deactivated' } } });
    await tx.em.flush();
    return { user, roles: target.roles };
  });
}

export async function reactivateAdminUser(rc: RequestContext, id: string): Promise<AdminUser> {
  requirePerson(rc);
  return inTransaction(rc, async (tx) => {
    const target = await findAdminUser(tx.em, id);
    if (cdnRoleOf(target.roles) === 'superadmin' && !isSuperadmin(tx)) throw onlySuperadmin('reactivate a superadmin');
    if (target.user.status !== 'suspended') throw new ApiError('CONFLICT', 'The admin user is not deactivated');
    const user = await reinstateUser(tx, target.user.id, 'Reactivated as a CDN admin user');
    recordAudit(tx, { action: 'admin_user.reactivated', resource_type: 'admin_user', resource_id: user.id, changes: { status: { from: 'deactivated', to: adminUserStatus(user) } } });
    await tx.em.flush();
    return { user, roles: target.roles };
  });
}
