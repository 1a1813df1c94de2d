// The CDN roles of document 3 (DESIGN.md §5) as an admin user holds them: a
// platform user may hold several roles, and the CDN admin user record shows
// the most privileged CDN one. `admin` and `superadmin` are the platform's
// roles of those names.
export const CDN_ROLES = ['viewer', 'operator', 'admin', 'superadmin'] as const;
export type CdnRole = (typeof CDN_ROLES)[number];

const RANK: Record<CdnRole, number> = { viewer: 1, operator: 2, admin: 3, superadmin: 4 };

/** The most privileged CDN role among `roles`, or null for a user who is no CDN admin user. */
export function cdnRoleOf(roles: readonly string[]): CdnRole | null {
  let best: CdnRole | null = null;
  for (const role of roles) {
    if (role in RANK && (best === null || RANK[role as CdnRole] > RANK[best])) best = role as CdnRole;
  }
  return best;
}

export const cdnRank = (role: CdnRole): number => RANK[role];

/** SQL: the rank (0 = none) of the most privileged unexpired CDN role of the user `alias.id`. */
export function cdnRankSql(alias: string): string {
  const cases = CDN_ROLES.map((role) => `when '${role}' then ${RANK[role]}`).join(' ');
  return `coalesce((select max(case ur.role_name ${cases} end) from user_role ur`
    + ` where ur.user_id = ${alias}.id and (ur.expires_at is null or ur.expires_at > now())), 0)`;
}
