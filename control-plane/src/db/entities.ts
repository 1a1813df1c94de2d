// Every entity of the control plane, for ORM discovery. Each capability
// folder owns its entities; this list only gathers them.
import type { EntityClass } from '@mikro-orm/core';
import { User } from '../accounts/user.entity.ts';
import { AuditEntry } from '../audit/audit-entry.entity.ts';
import { JwtSigningKey, OneTimeToken, RecoveryCode, RefreshToken, Session } from '../auth/auth.entities.ts';
import { Role, RolePermission, UserRole } from '../auth/permissions/role.entity.ts';

export const entities: EntityClass<object>[] = [
  AuditEntry, User, Role, RolePermission, UserRole, Session, RefreshToken, OneTimeToken, RecoveryCode, JwtSigningKey,
];
