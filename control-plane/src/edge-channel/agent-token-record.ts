// The agent token record and its request body. The value is never part of
// the record: create and rotate answer it once, in `token`, through
// issuedAgentTokenRecord; reads and lists cannot show it.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { dateTime, lineText, orNull, timestamp, timestampOrNull, uuid } from '../http/schemas.ts';
import { AGENT_TOKEN_STATUSES } from './agent-token.entity.ts';

export const agentTokenRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  description: orNull(z.string()),
  token_hint: z.string().describe('`agt_` and the first 4 characters of the value, to tell tokens apart (never the value)'),
  status: z.enum(AGENT_TOKEN_STATUSES),
  expires_at: timestampOrNull().describe('null: never expires. Past it the token is refused and its streams are closed, though its status stays active.'),
  last_used_at: timestampOrNull().describe('When an agent last opened a control stream with it'),
  revoked_at: timestampOrNull(),
  created_at: timestamp(),
  updated_at: timestamp(),
  created_by: orNull(z.uuid()).describe('The superadmin who issued it; null when issued with the agent-token CLI'),
  replaced_by: orNull(z.uuid()).describe('On a rotated (revoked) token: the token that replaced it'),
});

export const agentTokenResource = versioned(agentTokenRecord);

export const issuedAgentTokenRecord = agentTokenRecord.extend({
  token: z.string().describe('The token\'s value (`agt_` + 43 characters), shown this once: give it to the edge agent as AGENT_TOKEN now.'),
});

export const issuedAgentTokenResource = versioned(issuedAgentTokenRecord);

/** Free text about the token (where the agent runs, who looks after it): up to 500 characters, no NUL. */
const description = z.string().trim().max(500).regex(/^[^\u0000]*$/, 'Must not contain NUL');

export const createAgentTokenBody = z.strictObject({
  name: lineText(100).describe('E.g. the edge node or site it is for'),
  description: description.nullable().default(null).transform((v) => (v === '' ? null : v)),
  expires_at: dateTime().nullable().default(null).transform((v) => (v === null ? null : new Date(v)))
    .describe('Omit (or null) for a token that never expires. Must be in the future.'),
});

export type CreateAgentTokenInput = z.output<typeof createAgentTokenBody>;

/** The arguments of the agent-token command (its CLI parses them before loading the rest: a bad argument is refused quickly). */
export const agentTokenArgs = z.discriminatedUnion('action', [
  createAgentTokenBody.extend({ action: z.literal('create') }),
  z.strictObject({ action: z.literal('list'), status: z.enum(AGENT_TOKEN_STATUSES).optional() }),
  z.strictObject({ action: z.literal('revoke'), id: uuid() }),
  z.strictObject({ action: z.literal('rotate'), id: uuid() }),
]);
