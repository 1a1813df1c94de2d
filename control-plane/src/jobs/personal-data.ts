// What the job table holds about a user (core/personal-data.ts): payloads
// and error texts that name them. Nothing to export (jobs are the platform's
// own work), and user ids alone are not scrubbed (the erased account keeps
// its id as a tombstone); a job whose payload or error names the user — by
// id, e-mail address, phone number or IP address — has every value that
// names them replaced. The table is kept small by jobs.prune, so it is
// searched whole.
import { identifierMatcher, scrubJson, scrubText, type PersonalDataProvider } from '../core/personal-data.ts';

/** Identifiers distinctive enough to search the whole table by (not names, which other people share). */
const distinctive = (value: string) => value.includes('@') || (/^[+\d.:a-f]+$/i.test(value) && /\d/.test(value));

export const jobPersonalData: PersonalDataProvider = {
  name: 'jobs',

  async erase(rc, subject) {
    const matcher = identifierMatcher(subject.identifiers);
    if (!matcher) return;
    const needles = [subject.userId, ...subject.identifiers.filter(distinctive)].map((n) => n.toLowerCase());
    const rows = await rc.em.execute<{ id: string; payload: unknown; last_error: string | null }[]>(
      `select id, payload, last_error from job where ${needles.map(() => `(strpos(lower(payload::text), ?) > 0 or strpos(lower(coalesce(last_error, '')), ?) > 0)`).join(' or ')}`,
      needles.flatMap((n) => [n, n]),
    );
    for (const row of rows) {
      const payload = typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload;
      const scrubbed = scrubJson(payload, matcher);
      const error = row.last_error === null ? null : scrubText(row.last_error, subject.identifiers);
      if (JSON.stringify(scrubbed) !== JSON.stringify(payload) || error !== row.last_error) {
        await rc.em.execute(`update job set payload = ?::jsonb, last_error = ? where id = ?`, [JSON.stringify(scrubbed), error, row.id]);
      }
    }
  },
};
