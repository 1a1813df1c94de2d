// Who is answerable for what an actor does on the CDN interface.
import type { RequestContext } from '../core/request-context.ts';

/**
 * The person behind the request: the user, or for an API token the user who
 * created it (the resolver keeps `created_by` on the actor), so every
 * credential a token makes still names a person. The audit entry names the
 * token itself as actor.
 */
export function responsibleUserId(rc: RequestContext): string | null {
  const actor = rc.actor;
  if (actor?.type === 'user') return actor.id;
  if (actor?.type === 'api_token') return (actor.record?.created_by as string | null | undefined) ?? null;
  return null;
}
