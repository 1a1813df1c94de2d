// The roles of the platform and the permissions each carries (document 1
// part 5, DESIGN.md §5). Code is the source of truth: auth's syncRoleCatalog
// writes it to the role tables at start, so every replica agrees. A framework
// folder: route declarations name a `Permission` from here (a typo is a type
// error), and the guard matches grants with `matchPermission`.

export interface PermissionGrant {
  permission: string;
  /** null: global. Set: type-scoped (and exact when resource_id is set too). */
  resource_type: string | null;
  resource_id: string | null;
}

/** Matches any permission (superadmin). */
export const ALL_PERMISSIONS = '*';

// What a subscriber may do to their own account: type-scoped to `user`, so
// they never satisfy an unscoped (admin) check; ownership is checked on top.
const subscriberPermissions = [
  'users.read', 'users.update', 'users.delete',
  'sessions.read', 'sessions.revoke', 'mfa.manage',
  'profiles.read', 'profiles.write',
  'subscriptions.read', 'subscriptions.write',
  'payment_methods.read', 'payment_methods.write',
  'invoices.read', 'coupons.validate', 'gift_cards.read', 'gift_cards.redeem',
  'notifications.read', 'notifications.write', 'exports.read', 'exports.write',
] as const;

const cdnRead = ['cdn.read'] as const;
const cdnOperate = [...cdnRead, 'cdn.purge', 'cdn.prefetch', 'cdn.log_drains.test'] as const;
const cdnAdmin = [...cdnOperate, 'cdn.write', 'cdn.admin_users.manage', 'cdn.api_tokens.manage', 'cdn.audit.read', 'cdn.config.publish'] as const;

const adminPermissions = [
  ...subscriberPermissions,
  'admin.users.read', 'admin.users.update', 'admin.users.suspend',
  'admin.subscriptions.read', 'admin.subscriptions.manage',
  // Coupons and gift cards (the plans they apply to are superadmin's: plans.manage).
  'admin.billing.read', 'admin.billing.manage',
  'audit.read',
  ...cdnAdmin,
] as const;

/**
 * Held only through the superadmin wildcard: superadmin scope (granting
 * superadmin, managing plans, issuing the agent tokens edge agents connect
 * with: platform-level secrets).
 */
const superadminOnly = ['users.grant_superadmin', 'plans.manage', 'cdn.agent_tokens.manage'] as const;

/** Every permission a route may require. */
export type Permission = (typeof adminPermissions)[number] | (typeof superadminOnly)[number];

const scoped = (permissions: readonly Permission[], resourceType: string): PermissionGrant[] =>
  permissions.map((permission) => ({ permission, resource_type: resourceType, resource_id: null }));
const global = (permissions: readonly (Permission | typeof ALL_PERMISSIONS)[]): PermissionGrant[] =>
  permissions.map((permission) => ({ permission, resource_type: null, resource_id: null }));

export const ROLE_NAMES = ['subscriber', 'partner', 'admin', 'superadmin', 'viewer', 'operator'] as const;
export type RoleName = (typeof ROLE_NAMES)[number];

export const roleCatalog: Record<RoleName, { description: string; grants: PermissionGrant[] }> = {
  subscriber: { description: 'A viewer of the platform managing their own account', grants: scoped(subscriberPermissions, 'user') },
  partner: { description: 'A partner account; manages its own account like a subscriber', grants: scoped(subscriberPermissions, 'user') },
  admin: { description: 'Platform administrator: users, subscriptions and every CDN write', grants: global(adminPermissions) },
  superadmin: { description: 'Everything, including plans and granting superadmin', grants: global([ALL_PERMISSIONS]) },
  viewer: { description: 'CDN: read-only', grants: global(cdnRead) },
  operator: { description: 'CDN: reads, purges, prefetches and tests log drains', grants: global(cdnOperate) },
};

export type MatchTier = 'exact' | 'type' | 'global';

export interface PermissionCheck {
  permission: Permission;
  resourceType?: string;
  resourceId?: string;
}

/**
 * Document 1 §5.3: exact (permission + type + id), then type-scoped
 * (permission + type), then global (permission only); first match wins.
 * A check without a resource type (admin lists) is met by global grants only.
 */
export function matchPermission(grants: readonly PermissionGrant[], check: PermissionCheck): MatchTier | null {
  const named = (g: PermissionGrant) => g.permission === check.permission || g.permission === ALL_PERMISSIONS;
  if (check.resourceType !== undefined && check.resourceId !== undefined) {
    if (grants.some((g) => named(g) && g.resource_type === check.resourceType && g.resource_id === check.resourceId)) return 'exact';
  }
  if (check.resourceType !== undefined) {
    if (grants.some((g) => named(g) && g.resource_type === check.resourceType && g.resource_id === null)) return 'type';
  }
  if (grants.some((g) => named(g) && g.resource_type === null)) return 'global';
  return null;
}
