// What the audit trail holds about a user (core/personal-data.ts). Entries
// about a user are those they made (actor_id), those about their account
// (resource user/<id>) and those about their resources, which name the owner
// as metadata.user_id (the convention recordAudit's callers follow). The
// export lists them; the erasure keeps them (the trail must stay whole) but
// takes out what identifies the person: the address and user agent, and
// every metadata value that names them or sits under a personal field.
import type { PersonalDataProvider } from '../core/personal-data.ts';
import { identifierMatcher, scrubJson } from '../core/personal-data.ts';

const ABOUT_USER = `(actor_id = ? or (resource_type = 'user' and resource_id = ?) or (metadata->>'user_id') = ?)`;
const about = (userId: string) => [userId, userId, userId];

interface EntryRow {
  id: string;
  action: string;
  actor_id: string | null;
  actor_type: string;
  actor_role: string | null;
  resource_type: string;
  resource_id: string | null;
  ip_address: string | null;
  user_agent: string | null;
  metadata: Record<string, unknown> | string;
  created_at: Date | string;
}

const json = (value: EntryRow['metadata']) => (typeof value === 'string' ? JSON.parse(value) as Record<string, unknown> : value);

export const auditPersonalData: PersonalDataProvider = {
  name: 'audit',

  async export(rc, userId) {
    const rows = await rc.em.execute<EntryRow[]>(`select * from audit_log where ${ABOUT_USER} order by created_at, id`, about(userId));
    return rows.map((row) => ({
      action: row.action,
      // Who acted, without naming other people: the user, staff (with their role) or the platform.
      actor: row.actor_id === userId ? 'you' : row.actor_type === 'system' ? 'system' : `${row.actor_type}${row.actor_role ? ` (${row.actor_role})` : ''}`,
      resource_type: row.resource_type,
      resource_id: row.resource_id,
      ip_address: row.actor_id === userId ? row.ip_address : null,
      user_agent: row.actor_id === userId ? row.user_agent : null,
      metadata: json(row.metadata),
      created_at: new Date(row.created_at),
    }));
  },

  async identifiers(rc, userId) {
    // The addresses the user acted from may have been copied elsewhere (metadata, job payloads).
    const rows = await rc.em.execute<{ ip_address: string }[]>(
      `select distinct ip_address from audit_log where actor_id = ? and ip_address is not null`, [userId]);
    return rows.map((r) => r.ip_address);
  },

  async erase(rc, subject) {
    const matcher = identifierMatcher(subject.identifiers);
    const rows = await rc.em.execute<Pick<EntryRow, 'id' | 'metadata'>[]>(`select id, metadata from audit_log where ${ABOUT_USER}`, about(subject.userId));
    for (const row of rows) {
      const metadata = json(row.metadata);
      const scrubbed = scrubJson(metadata, matcher);
      if (JSON.stringify(scrubbed) !== JSON.stringify(metadata)) {
        await rc.em.execute(`update audit_log set metadata = ?::jsonb where id = ?`, [JSON.stringify(scrubbed), row.id]);
      }
    }
    await rc.em.execute(`update audit_log set ip_address = null, user_agent = null where ${ABOUT_USER} and (ip_address is not null or user_agent is not null)`, about(subject.userId));
  },
};
