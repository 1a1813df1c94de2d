// Personal data is held all over the platform: the account (accounts), its
// logins (auth), subscriptions and payment methods (billing), notifications,
// the audit trail, queued jobs. Each holder describes what it keeps about a
// user through one provider; the composition root gathers the providers into
// the services (`app.personalData`), and the account's data export (GDPR
// Art. 15/20) and erasure (Art. 17) walk them without knowing the holders.
// Adding a capability that stores personal data = adding its provider.
import type { RequestContext } from './request-context.ts';

/** The person being erased, as every provider saw them before anything was erased. */
export interface PersonalDataSubject {
  userId: string;
  /**
   * Values that identify the person (e-mail addresses, names, phone numbers,
   * IP addresses) gathered from every provider first, so holders of copies
   * (audit metadata, job payloads) can scrub them wherever they were copied.
   */
  identifiers: string[];
}

/** What one part of the platform holds about a user, for export and erasure. Methods, so providers may narrow the services they take. */
export interface PersonalDataProvider<S = unknown> {
  /** Names the provider's section of the export archive (unique). */
  name: string;
  /**
   * Everything this holder keeps about the user, as JSON-able data (dates may
   * be Date). Never secrets: password or PIN hashes, TOTP secrets, token
   * hashes, gateway references. Omitted: the holder has nothing to export.
   */
  export?(rc: RequestContext, userId: string, services: S): Promise<unknown>;
  /** Identifying values this holder keeps about the user (see PersonalDataSubject.identifiers). */
  identifiers?(rc: RequestContext, userId: string, services: S): Promise<string[]>;
  /**
   * Erases (deletes or anonymises) the user's personal data in `rc.em`'s
   * transaction. Idempotent: an erasure that failed half-way runs again.
   * Files are removed here too (a missing file is not an error).
   */
  erase(rc: RequestContext, subject: PersonalDataSubject, services: S): Promise<void>;
}

/** Shortest identifier worth scrubbing (shorter ones would match unrelated text). */
const MIN_IDENTIFIER_LENGTH = 3;
export const ERASED = '[erased]';

/** The distinct identifiers worth matching, longest first. */
export function usableIdentifiers(values: readonly (string | null | undefined)[]): string[] {
  const seen = new Set<string>();
  for (const value of values) {
    const trimmed = value?.trim();
    if (trimmed && trimmed.length >= MIN_IDENTIFIER_LENGTH) seen.add(trimmed.toLowerCase());
  }
  return [...seen].sort((a, b) => b.length - a.length);
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * A matcher for text that names the person: an identifier appears as a whole
 * word (not inside a longer word or number), case-insensitively. Null when
 * there is nothing to match.
 */
export function identifierMatcher(identifiers: readonly string[], flags = 'iu'): RegExp | null {
  const usable = usableIdentifiers(identifiers);
  if (usable.length === 0) return null;
  return new RegExp(`(^|[^\\p{L}\\p{N}])(${usable.map(escapeRegExp).join('|')})(?=$|[^\\p{L}\\p{N}])`, flags);
}

/** Free text with every whole-word occurrence of an identifier replaced by `[erased]`. */
export function scrubText(text: string, identifiers: readonly string[]): string {
  const matcher = identifierMatcher(identifiers, 'giu');
  return matcher ? text.replace(matcher, (_match, before: string) => `${before}${ERASED}`) : text;
}

/** Field names whose values are personal whoever they belong to (in audit changes and job payloads). */
const PERSONAL_FIELD = /^(e_?mail|display_name|name|first_name|last_name|full_name|phone|phone_number|ip|ip_address|user_agent|address|billing_name|wallet_email)$/i;

/**
 * A copy of a JSON value with every string that names the person (per
 * `matcher`), and every value under a personal field name, replaced by
 * `[erased]`. Keys, numbers, booleans and null stay; the shape stays.
 */
export function scrubJson(value: unknown, matcher: RegExp | null, personal = false): unknown {
  if (Array.isArray(value)) return value.map((v) => scrubJson(v, matcher, personal));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubJson(v, matcher, personal || PERSONAL_FIELD.test(k))]));
  }
  if (typeof value !== 'string') return value;
  if (personal && value !== '') return ERASED;
  return matcher?.test(value) ? ERASED : value;
}
