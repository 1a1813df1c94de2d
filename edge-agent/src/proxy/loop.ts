// Forwarding loops (RFC 8586): every request the agent forwards or makes
// (to an origin, a shield, for an error page or a health check) carries this
// platform's CDN-Loop entry after whatever entries it came with, and a request
// that arrives already naming the platform more than MAX_LOOP_VISITS times is
// answered 508 Loop Detected before any cache lookup or fill (proxy.ts). A
// legitimate request names it at most twice on arrival (an edge and its shield),
// or a few times when one endpoint's origin is another endpoint of the platform.

/** This platform's cdn-id (a pseudonym, RFC 8586 §2), the same on every agent; no parameters. */
export const CDN_LOOP_TOKEN = 'streaming-platform-cdn';

/** How many of our entries an arriving request may carry; one more is a loop (508). */
export const MAX_LOOP_VISITS = 3;

/** How many entries of a CDN-Loop value name this platform (a cdn-id compared case-insensitively, its parameters ignored). */
export function loopVisits(value: string | undefined): number {
  if (value === undefined || value.length < CDN_LOOP_TOKEN.length) return 0;
  let n = 0;
  for (const element of value.split(',')) {
    const semi = element.indexOf(';');
    const id = (semi === -1 ? element : element.slice(0, semi)).trim();
    if (id.length === CDN_LOOP_TOKEN.length && id.toLowerCase() === CDN_LOOP_TOKEN) n++;
  }
  return n;
}

/** The CDN-Loop value to send on: the entries the request came with, then ours. */
export function withLoopEntry(value: string | undefined): string {
  return value ? `${value}, ${CDN_LOOP_TOKEN}` : CDN_LOOP_TOKEN;
}

/** The body of the 508: what happened and where to look. */
export function loopRefusal(visits: number): string {
  return `Loop detected: this request has already passed through this CDN ${visits} times; check that the endpoint's origin does not point back at the CDN\n`;
}
