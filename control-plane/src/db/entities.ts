// Every entity of the control plane, for ORM discovery. Each capability
// folder owns its entities; this list only gathers them.
import type { EntityClass } from '@mikro-orm/core';
import { AuditEntry } from '../audit/audit-entry.entity.ts';

export const entities: EntityClass<object>[] = [AuditEntry];
