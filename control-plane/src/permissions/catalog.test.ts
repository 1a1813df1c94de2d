import t from 'tap';
import { matchPermission, roleCatalog, type PermissionGrant } from './catalog.ts';

const grant = (permission: string, resource_type: string | null = null, resource_id: string | null = null): PermissionGrant => ({ permission, resource_type, resource_id });

t.test('exact, then type-scoped, then global: first match wins', async (t) => {
  const grants = [grant('users.read'), grant('users.read', 'user'), grant('users.read', 'user', 'u1')];
  t.equal(matchPermission(grants, { permission: 'users.read', resourceType: 'user', resourceId: 'u1' }), 'exact');
  t.equal(matchPermission(grants, { permission: 'users.read', resourceType: 'user', resourceId: 'u2' }), 'type');
  t.equal(matchPermission(grants, { permission: 'users.read' }), 'global');
});

t.test('a type-scoped grant does not satisfy an unscoped (admin list) check', async (t) => {
  const grants = [grant('users.read', 'user')];
  t.equal(matchPermission(grants, { permission: 'users.read', resourceType: 'user' }), 'type');
  t.equal(matchPermission(grants, { permission: 'users.read' }), null);
});

t.test('an exact grant satisfies only its own resource', async (t) => {
  const grants = [grant('profiles.write', 'profile', 'p1')];
  t.equal(matchPermission(grants, { permission: 'profiles.write', resourceType: 'profile', resourceId: 'p1' }), 'exact');
  t.equal(matchPermission(grants, { permission: 'profiles.write', resourceType: 'profile', resourceId: 'p2' }), null);
  t.equal(matchPermission(grants, { permission: 'profiles.write', resourceType: 'profile' }), null);
});

t.test('a grant of another permission or type never matches', async (t) => {
  t.equal(matchPermission([grant('users.update', 'user')], { permission: 'users.read', resourceType: 'user' }), null);
  t.equal(matchPermission([grant('users.read', 'profile')], { permission: 'users.read', resourceType: 'user' }), null);
});

t.test('global grants satisfy every tier', async (t) => {
  const grants = [grant('users.read')];
  t.equal(matchPermission(grants, { permission: 'users.read', resourceType: 'user', resourceId: 'x' }), 'global');
});

t.test('the catalog: subscribers are type-scoped, admins global, superadmin everything', async (t) => {
  t.ok(roleCatalog.subscriber.grants.every((g) => g.resource_type === 'user'));
  t.equal(matchPermission(roleCatalog.subscriber.grants, { permission: 'admin.users.read' }), null);
  t.equal(matchPermission(roleCatalog.admin.grants, { permission: 'admin.users.read' }), 'global');
  t.equal(matchPermission(roleCatalog.admin.grants, { permission: 'plans.manage' }), null, 'plans are superadmin only');
  t.equal(matchPermission(roleCatalog.superadmin.grants, { permission: 'plans.manage' }), 'global');
  for (const role of ['admin', 'operator', 'viewer'] as const) {
    t.equal(matchPermission(roleCatalog[role].grants, { permission: 'cdn.agent_tokens.manage' }), null, `agent tokens are superadmin only (${role})`);
  }
  t.equal(matchPermission(roleCatalog.superadmin.grants, { permission: 'cdn.agent_tokens.manage' }), 'global');
  t.equal(matchPermission(roleCatalog.viewer.grants, { permission: 'cdn.write' }), null);
  t.equal(matchPermission(roleCatalog.operator.grants, { permission: 'cdn.purge' }), 'global');
});
