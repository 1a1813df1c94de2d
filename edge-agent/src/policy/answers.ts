// The answers request policies give instead of the cache and the origin. Every
// refusal is the same 403 whatever refused it and why (the reason goes to the
// access record and the edge_policy_denials_total metric, never to the viewer,
// so a prober learns nothing about which check failed).
import type { PolicyAnswer, PolicyDenial } from './index.ts';

const FORBIDDEN_BODY = 'Forbidden\n';

export function forbidden(denial: PolicyDenial): PolicyAnswer {
  return {
    status: 403,
    headers: ['content-type', 'text/plain; charset=utf-8', 'content-length', String(FORBIDDEN_BODY.length), 'cache-control', 'no-store'],
    body: FORBIDDEN_BODY,
    denial,
  };
}

/** A redirect the edge answers itself (empty body). */
export function redirect(status: number, location: string): PolicyAnswer {
  return { status, headers: ['location', location, 'content-length', '0'], body: null };
}
