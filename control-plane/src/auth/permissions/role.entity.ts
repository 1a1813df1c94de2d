import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../../accounts/index.ts';

// Roles carry permissions (never users directly); users hold roles, each
// assignment with an optional expiry (document 1 part 5).
export const RoleSchema = defineEntity({
  name: 'Role',
  tableName: 'role',
  properties: {
    name: p.string().length(50).primary(),
    description: p.string().length(500).nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
  },
});
export class Role extends RoleSchema.class {}
RoleSchema.setClass(Role);

export const RolePermissionSchema = defineEntity({
  name: 'RolePermission',
  tableName: 'role_permission',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    role: () => p.manyToOne(Role).fieldName('role_name').deleteRule('cascade'),
    permission: p.string().length(100),
    resource_type: p.string().length(50).nullable(),
    resource_id: p.string().length(100).nullable(),
  },
  indexes: [{ name: 'role_permission_role_idx', properties: ['role'] }],
});
export class RolePermission extends RolePermissionSchema.class {}
RolePermissionSchema.setClass(RolePermission);

export const UserRoleSchema = defineEntity({
  name: 'UserRole',
  tableName: 'user_role',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    role: () => p.manyToOne(Role).fieldName('role_name').deleteRule('cascade'),
    expires_at: p.datetime().nullable(),
    granted_by: p.uuid().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  uniques: [{ name: 'user_role_user_role_key', properties: ['user', 'role'] }],
});
export class UserRole extends UserRoleSchema.class {}
UserRoleSchema.setClass(UserRole);
