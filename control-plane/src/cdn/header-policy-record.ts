// The Response headers policy record of document 3 §2 and its request bodies.
// Every member has a default (the edge snapshot's responseHeadersPolicySnapshot),
// every override flag defaults to true (replace the origin's value), and what
// the edge would emit is checked here: header names are RFC 9110 tokens,
// values single lines, hop-by-hop and framing names are refused (the value
// sets and the edge-owned names are the edge's own, shared/src/config/
// response-policies.ts, whose rules the service runs for the 422s).
import { z } from 'zod';
import {
  EDGE_OWNED_HEADERS, isCorsOrigin, isFieldValue, REFERRER_POLICIES, X_FRAME_OPTIONS, X_XSS_VALUES,
} from '../../../shared/src/config/response-policies.ts';
import { versioned } from '../http/route.ts';
import { orNull, timestamp, withExample } from '../http/schemas.ts';
import type { Cors, HeaderEntry, SecurityHeaders } from './policies.entities.ts';
import { methodField, nameField, tokenField } from './fields.ts';

export const MAX_HEADER_ENTRIES = 50;
export const MAX_HEADER_VALUE = 4096;
export const MAX_POLICY_STRING = 4096;
export const MAX_CORS_AGE = 86_400;
export const MAX_HSTS_AGE = 63_072_000;
export const DEFAULT_CORS: Cors = {
  enabled: false, allow_origins: ['*'], allow_methods: ['GET', 'HEAD'], allow_headers: [], expose_headers: [], allow_credentials: false, max_age_seconds: null,
  override_origin: true,
};
export const DEFAULT_SECURITY_HEADERS: SecurityHeaders = {
  strict_transport_security: { enabled: false, max_age_seconds: 31_536_000, include_subdomains: false, preload: false, override: true },
  content_security_policy: { enabled: false, policy: '', report_only: false, override: true },
  x_content_type_options: { enabled: false, override: true },
  x_frame_options: { enabled: false, value: 'DENY', override: true },
  referrer_policy: { enabled: false, value: 'strict-origin-when-cross-origin', override: true },
  permissions_policy: { enabled: false, policy: '', override: true },
  x_xss_protection: { enabled: false, value: '0', override: true },
};

const toggleRecord = { enabled: z.boolean(), override: z.boolean() };
const headerRecord = z.object({ name: z.string(), value: z.string(), override: z.boolean() });

export const headerPolicyRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  description: z.string(),
  cors: z.object({
    enabled: z.boolean(), allow_origins: z.array(z.string()), allow_methods: z.array(z.string()), allow_headers: z.array(z.string()),
    expose_headers: z.array(z.string()), allow_credentials: z.boolean(), max_age_seconds: orNull(z.number().int()), override_origin: z.boolean(),
  }),
  security_headers: z.object({
    strict_transport_security: z.object({ ...toggleRecord, max_age_seconds: z.number().int(), include_subdomains: z.boolean(), preload: z.boolean() }),
    content_security_policy: z.object({ ...toggleRecord, policy: z.string(), report_only: z.boolean() }),
    x_content_type_options: z.object(toggleRecord),
    x_frame_options: z.object({ ...toggleRecord, value: z.string() }),
    referrer_policy: z.object({ ...toggleRecord, value: z.string() }),
    permissions_policy: z.object({ ...toggleRecord, policy: z.string() }),
    x_xss_protection: z.object({ ...toggleRecord, value: z.string() }),
  }),
  custom_response_headers: z.array(headerRecord),
  custom_request_headers: z.array(headerRecord),
  remove_response_headers: z.array(z.string()),
  remove_request_headers: z.array(z.string()),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const headerPolicyResource = versioned(headerPolicyRecord);

/** A header field value the edge can send: one line, no NUL (RFC 9110 §5.5). */
const singleLine = (max: number) => z.string().max(max).refine(isFieldValue, 'Must be a single line (no CR, LF, NUL or other control characters)');
/** A header name a policy may set or remove. */
const configurableName = () => tokenField('header').refine((n) => !EDGE_OWNED_HEADERS.has(n.toLowerCase()), 'A hop-by-hop or framing header; the edge owns it');
const noRepeats = (names: string[]) => new Set(names.map((n) => n.toLowerCase())).size === names.length;

const headerEntries = z.array(z.strictObject({ name: configurableName(), value: singleLine(MAX_HEADER_VALUE), override: z.boolean().default(true) }))
  .max(MAX_HEADER_ENTRIES)
  .refine((h) => noRepeats(h.map((e) => e.name)), 'Must not name a header twice (names are case-insensitive)');
const removedHeaders = z.array(configurableName()).max(MAX_HEADER_ENTRIES).refine(noRepeats, 'Must not name a header twice (names are case-insensitive)');

const corsOrigin = z.string().max(2048).refine(isCorsOrigin, 'Must be "*" or an origin such as https://example.com (a leading *. allows subdomains)');
const corsInput = z.strictObject({
  enabled: z.boolean(),
  allow_origins: z.array(corsOrigin).min(1).max(100).describe('Origins answered in Access-Control-Allow-Origin ("*" for any); default ["*"]'),
  allow_methods: z.array(methodField()).max(7),
  allow_headers: z.array(z.union([z.literal('*'), tokenField('header')])).max(MAX_HEADER_ENTRIES),
  expose_headers: z.array(z.union([z.literal('*'), tokenField('header')])).max(MAX_HEADER_ENTRIES),
  allow_credentials: z.boolean(),
  max_age_seconds: z.number().int().min(0).max(MAX_CORS_AGE).nullable(),
  override_origin: z.boolean().describe('true: replace the origin\'s CORS headers; false: only fill missing ones'),
}).partial();

const override = z.boolean().describe('true (default): replace the origin\'s header; false: only fill a missing one');
const securityInput = z.strictObject({
  strict_transport_security: z.strictObject({
    enabled: z.boolean(), max_age_seconds: z.number().int().min(0).max(MAX_HSTS_AGE), include_subdomains: z.boolean(), preload: z.boolean(), override,
  }).partial(),
  content_security_policy: z.strictObject({ enabled: z.boolean(), policy: singleLine(MAX_POLICY_STRING), report_only: z.boolean(), override }).partial(),
  x_content_type_options: z.strictObject({ enabled: z.boolean(), override }).partial(),
  x_frame_options: z.strictObject({ enabled: z.boolean(), value: z.enum(X_FRAME_OPTIONS), override }).partial(),
  referrer_policy: z.strictObject({ enabled: z.boolean(), value: z.enum(REFERRER_POLICIES), override }).partial(),
  permissions_policy: z.strictObject({ enabled: z.boolean(), policy: singleLine(MAX_POLICY_STRING), override }).partial(),
  x_xss_protection: z.strictObject({ enabled: z.boolean(), value: z.enum(X_XSS_VALUES), override }).partial(),
}).partial();

const policyFields = {
  name: nameField(),
  description: z.string().trim().max(500).regex(/^[^\u0000]*$/, 'Must not contain NUL'),
  cors: corsInput.describe('Members sent change, others keep their values'),
  security_headers: securityInput.describe('Per header, members sent change, others keep their values'),
  custom_response_headers: headerEntries.describe('Set on responses to viewers'),
  custom_request_headers: headerEntries.describe('Set on requests to the origin'),
  remove_response_headers: removedHeaders,
  remove_request_headers: removedHeaders,
};

export const createHeaderPolicyBody = withExample(z.strictObject(policyFields).partial().required({ name: true }), {
  name: 'Player CORS and security headers', description: 'Lets the web player on www.example.com read the streams',
  cors: { enabled: true, allow_origins: ['https://www.example.com'], allow_methods: ['GET', 'HEAD', 'OPTIONS'], allow_headers: ['Range'], expose_headers: ['Content-Length', 'Content-Range'], max_age_seconds: 600 },
  security_headers: {
    strict_transport_security: { enabled: true, max_age_seconds: 31536000, include_subdomains: true },
    x_content_type_options: { enabled: true },
    referrer_policy: { enabled: true, value: 'strict-origin-when-cross-origin' },
  },
  custom_response_headers: [{ name: 'Timing-Allow-Origin', value: 'https://www.example.com', override: true }],
  remove_response_headers: ['X-Powered-By'],
});
export const updateHeaderPolicyBody = withExample(z.strictObject(policyFields).partial(), { cors: { allow_origins: ['https://www.example.com', 'https://*.example.com'] } });
export type HeaderPolicyInput = z.output<typeof updateHeaderPolicyBody>;
export type { HeaderEntry };
