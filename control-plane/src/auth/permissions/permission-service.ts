// Reads a caller's grants from stored role assignments (never from the token)
// and keeps the role tables in step with the catalog.
import type { EntityManager } from '@mikro-orm/postgresql';
import { roleCatalog, type PermissionGrant } from '../../permissions/catalog.ts';

export interface CallerGrants {
  roles: string[];
  grants: PermissionGrant[];
}

/** Active (unexpired) roles of a user and the permissions they carry: one query. */
export async function loadUserGrants(em: EntityManager, userId: string): Promise<CallerGrants> {
  const rows = await em.execute<{ role_name: string; permission: string | null; resource_type: string | null; resource_id: string | null }[]>(
    `select ur.role_name, rp.permission, rp.resource_type, rp.resource_id
       from user_role ur left join role_permission rp on rp.role_name = ur.role_name
      where ur.user_id = ? and (ur.expires_at is null or ur.expires_at > now())`,
    [userId],
  );
  const roles = [...new Set(rows.map((r) => r.role_name))].sort();
  const grants = rows.filter((r) => r.permission !== null).map((r) => ({ permission: r.permission!, resource_type: r.resource_type, resource_id: r.resource_id }));
  return { roles, grants };
}

/** Grants of a set of role names (API tokens carry a role rather than assignments). */
export async function loadRoleGrants(em: EntityManager, roleNames: string[]): Promise<PermissionGrant[]> {
  if (!roleNames.length) return [];
  return em.execute(
    // `in (?)`: the driver expands an array parameter into a list; `= any(?)` received a bare string and failed.
    `select permission, resource_type, resource_id from role_permission where role_name in (?)`,
    [roleNames],
  );
}

/** Writes the catalog to the role tables; serialised by an advisory lock so replicas starting together agree. */
export async function syncRoleCatalog(em: EntityManager): Promise<void> {
  await em.transactional(async (tx) => {
    const conn = tx;
    await conn.execute(`select pg_advisory_xact_lock(727001)`);
    for (const [name, role] of Object.entries(roleCatalog)) {
      await conn.execute(
        `insert into role (name, description, created_at) values (?, ?, now())
         on conflict (name) do update set description = excluded.description`,
        [name, role.description],
      );
      await conn.execute(`delete from role_permission where role_name = ?`, [name]);
      for (const grant of role.grants) {
        await conn.execute(
          `insert into role_permission (id, role_name, permission, resource_type, resource_id) values (gen_random_uuid(), ?, ?, ?, ?)`,
          [name, grant.permission, grant.resource_type, grant.resource_id],
        );
      }
    }
  });
}

/** Assigns a role (idempotent); an expiry makes it temporary. */
export async function assignRole(em: EntityManager, userId: string, role: string, options: { expiresAt?: Date | null; grantedBy?: string | null } = {}): Promise<void> {
  await em.execute(
    `insert into user_role (id, user_id, role_name, expires_at, granted_by, created_at) values (gen_random_uuid(), ?, ?, ?, ?, now())
     on conflict (user_id, role_name) do update set expires_at = excluded.expires_at, granted_by = excluded.granted_by`,
    [userId, role, options.expiresAt ?? null, options.grantedBy ?? null],
  );
}

export async function removeRole(em: EntityManager, userId: string, role: string): Promise<void> {
  await em.execute(`delete from user_role where user_id = ? and role_name = ?`, [userId, role]);
}

/** Current roles of several users at once (for list responses). */
export async function activeRolesByUser(em: EntityManager, userIds: string[]): Promise<Map<string, string[]>> {
  const result = new Map<string, string[]>(userIds.map((id) => [id, []]));
  if (!userIds.length) return result;
  const rows = await em.execute<{ user_id: string; role_name: string }[]>(
    `select user_id, role_name from user_role where user_id in (?) and (expires_at is null or expires_at > now()) order by role_name`,
    [userIds],
  );
  for (const row of rows) result.get(row.user_id)?.push(row.role_name);
  return result;
}
