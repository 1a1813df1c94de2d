// The Purge request record and body (document 3 §2 "Purge request", §4.5).
// Which of paths and tags each purge_type takes is decided here (the spec's
// rule text is cut off): path and wildcard need paths and refuse tags, tag
// needs tags and refuses paths, all takes neither. Paths are absolute paths
// ("/videos/a.mp4", a query may follow) applying to every hostname of the
// endpoint (CDN hostname and custom domains); wildcard paths are globs the
// edge's matcher compiles. Every refusal is a 400 naming the field.
//
// The top-level submission (`POST /cache/purge`) takes the spec's input alone
// (issue 21 item 9): without distribution_id, `paths` may be full URLs, and
// the distribution is the endpoint serving their host (its CDN hostname or a
// validated custom domain), as Cloudflare and Fastly purge by URL; with
// neither distribution_id nor URLs (plain paths, tags, or all), the purge
// applies to every endpoint (its distribution_id reads null).
import { z } from 'zod';
import { pathGlobProblem } from '../../../shared/src/match/glob.ts';
import { normalizePath } from '../../../shared/src/match/path.ts';
import { orNull, timestamp, timestampOrNull, uuid, withExample } from '../http/schemas.ts';
import { idOf } from './fields.ts';
import { PURGE_TYPES, WORK_STATUSES, type PurgeRequest, type StoredPurge } from './purge-entity.ts';

export const MAX_PURGE_PATHS = 500;
export const MAX_PURGE_TAGS = 100;

export const purgeRecord = z.object({
  id: z.uuid(),
  distribution_id: orNull(z.uuid()).describe('The endpoint purged; null for a purge of every endpoint (a top-level purge naming no distribution and no URL)'),
  sequence: z.number().int().describe('Platform-wide, increasing in commit order: edge nodes apply purges in this order and catch up from the last one they applied'),
  purge_type: z.enum(PURGE_TYPES),
  type: z.enum(PURGE_TYPES).describe('Deprecated alias of purge_type (always equal)'),
  paths: z.array(z.string()),
  tags: z.array(z.string()),
  soft: z.boolean().describe('A soft purge: what it named was marked stale (revalidated with the origin before its next use, served stale meanwhile where the cache rule allows stale-while-revalidate or stale-if-error) instead of removed'),
  status: z.enum(WORK_STATUSES),
  edge_nodes_total: z.number().int(),
  edge_nodes_completed: z.number().int(),
  submitted_by: orNull(z.uuid()),
  completed_at: timestampOrNull(),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const presentPurge = (p: PurgeRequest | StoredPurge) => {
  // The submission's idempotency claim (purge-service.ts) is not part of the record.
  const { idempotency_key: _key, request_fingerprint: _fingerprint, ...record } = p as PurgeRequest & StoredPurge;
  return { ...record, distribution_id: 'distribution' in p ? idOf(p.distribution) : p.distribution_id, type: p.purge_type };
};

const FORBIDDEN_IN_PATH = /[\s\u0000-\u001f\u007f]/;

/** Why a path of a `path` purge cannot be used, or null. */
function exactPathProblem(path: string): string | null {
  if (!path.startsWith('/')) return 'must be an absolute path starting with "/" (the purge applies to every hostname of the endpoint)';
  if (FORBIDDEN_IN_PATH.test(path)) return 'must not contain whitespace or control characters';
  if (/[*?]/.test(path.split('?')[0]!)) return 'must not contain wildcards (use purge_type wildcard)';
  if (normalizePath(path.split('?')[0]!) === null) return 'cannot be normalised safely (encoded "/" or "\\", "#", malformed "%" or a ";" after a dot segment)';
  return null;
}

const purgeFields = {
  purge_type: z.enum(PURGE_TYPES).describe('path: exact objects; wildcard: path globs (`*` in a segment, `**` across, "/videos/*" everything under); tag: Cache-Tag / Surrogate-Key values; all: everything of the endpoint'),
  type: z.enum(PURGE_TYPES).describe('Deprecated alias of purge_type; when both are sent they must be equal'),
  paths: z.array(z.string().min(1).max(2048)).min(1).max(MAX_PURGE_PATHS)
    .describe(`Required by path and wildcard purges (1..${MAX_PURGE_PATHS}, each at most 2048 characters: absolute paths, a query may follow), refused otherwise`),
  tags: z.array(z.string().min(1).max(256).regex(/^[^\s,]+$/, 'Must be one tag without whitespace or commas')).min(1).max(MAX_PURGE_TAGS)
    .describe(`Required by tag purges (1..${MAX_PURGE_TAGS}, each at most 256 characters), refused otherwise`),
  soft: z.boolean().describe('Extension (Fastly\'s soft purge). true: mark what the purge names stale instead of removing it: the next request revalidates it with the origin (a conditional request) and may be served the stale copy meanwhile as the cache rule\'s stale-while-revalidate and stale-if-error allow; a later hard purge removes it. Default false'),
};

/** A full URL of a purge (http or https, no credentials or fragment), or null when `path` is not one. */
export function purgeUrl(path: string): URL | null {
  return /^https?:\/\//i.test(path) ? URL.parse(path) : null;
}

/** Why a full URL cannot be purged, or null. */
function urlProblem(path: string, kind: string): string | null {
  const url = purgeUrl(path);
  if (!url) return 'is not a valid URL';
  if (url.username || url.password) return 'must not carry credentials';
  if (path.includes('#')) return 'must not carry a fragment';
  const rest = url.pathname + url.search;
  return kind === 'wildcard' ? pathGlobProblem(url.pathname) : exactPathProblem(rest);
}

const checkPurge = (urls: boolean) => (body: { purge_type?: string; type?: string; paths?: string[]; tags?: string[] }, ctx: z.RefinementCtx) => {
  const issue = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  if (body.purge_type && body.type && body.purge_type !== body.type) issue(['type'], 'Must equal purge_type when both are sent (type is its deprecated alias)');
  const kind = body.purge_type ?? body.type;
  if (!kind) return issue(['purge_type'], 'Required: path, wildcard, tag or all');
  const needsPaths = kind === 'path' || kind === 'wildcard';
  if (needsPaths && !body.paths) issue(['paths'], `Required by a ${kind} purge`);
  if (!needsPaths && body.paths) issue(['paths'], `Not taken by a ${kind} purge`);
  if (kind === 'tag' && !body.tags) issue(['tags'], 'Required by a tag purge');
  if (kind !== 'tag' && body.tags) issue(['tags'], `Not taken by a ${kind} purge`);
  if (!needsPaths || !body.paths) return;
  const firstIsUrl = purgeUrl(body.paths[0]!) !== null;
  body.paths.forEach((path, i) => {
    const isUrl = /^https?:\/\//i.test(path);
    if (isUrl && !urls) return issue(['paths', i], `"${path}" must be an absolute path starting with "/" (the purge applies to every hostname of the endpoint)`);
    if (isUrl !== firstIsUrl) return issue(['paths', i], `"${path}" must be ${firstIsUrl ? 'a full URL' : 'a path'} as paths[0] is: full URLs and paths are not mixed`);
    const problem = isUrl ? urlProblem(path, kind) : kind === 'wildcard' ? pathGlobProblem(path) : exactPathProblem(path);
    if (problem) issue(['paths', i], `"${path}" ${problem}`);
  });
};

export const purgeBody = withExample(z.strictObject(purgeFields).partial().superRefine(checkPurge(false)),
  { purge_type: 'path', paths: ['/vod/intro/master.m3u8', '/vod/intro/poster.jpg'] });
export const topLevelPurgeBody = withExample(z.strictObject({
  ...purgeFields,
  distribution_id: uuid().describe('The distribution (endpoint) to purge. Left out: the endpoint serving the host of the full URLs in paths, or every endpoint'),
}).partial().superRefine(checkPurge(true)), { distribution_id: '5e8a1c3f-7b2d-4f6e-a9c0-1d4b7e2f8a36', purge_type: 'wildcard', paths: ['/vod/intro/*'] });
export type TopLevelPurgeInput = z.output<typeof topLevelPurgeBody>;
export type PurgeInput = z.output<typeof purgeBody>;
