// Redirects answered at the edge, last of the request policies (DESIGN.md §8):
// first the endpoint's tls_config.http_to_https_redirect, then the redirect
// rules of the route the request matched, in their order, the first whose
// match_path matches answering (shared/src/match/redirect.ts compiles them,
// as the control plane does when it checks them at write time).
// - To https: `https://<host>[:port]<path>?<query>` with the viewer's host and
//   the query as sent, on the agent's HTTPS port (HTTPS_PORT, or
//   HTTPS_PUBLIC_PORT when a port mapping sits in front; omitted when 443), so
//   a viewer lands on the listener that has its certificate; only for a viewer that did not come
//   over TLS (its socket, or the trusted proxy's X-Forwarded-Proto). The
//   endpoint setting answers 301 to GET and HEAD and 308 otherwise (the method
//   and body are kept); a route rule answers its status_code.
// - path: Location is redirect_to with `$1`…`$9` filled from the wildcards,
//   plus the viewer's query when redirect_to has none.
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileRedirectPattern, expandRedirectTarget, redirectRuleProblems } from '../../../shared/src/match/redirect.ts';
import { redirect } from './answers.ts';
import type { PolicyRequest, RequestPolicy } from './index.ts';

interface CompiledRule {
  toHttps: boolean;
  status: number;
  re: RegExp;
  target: string;
}

const httpsUrl = (ctx: PolicyRequest) => {
  const port = ctx.httpsPort == null || ctx.httpsPort === 443 ? '' : `:${ctx.httpsPort}`;
  return `https://${ctx.host.includes(':') ? `[${ctx.host}]` : ctx.host}${port}${ctx.path}${ctx.rawQuery === '' ? '' : `?${ctx.rawQuery}`}`;
};

/** Throws naming the route and rule the edge cannot answer (the control plane refuses those at write time). */
function compileRules(routeId: string, rules: EndpointSnapshot['routes'][number]['redirect_rules']): CompiledRule[] {
  return rules.map((rule, i) => {
    const problem = redirectRuleProblems(rule)[0];
    const compiled = compileRedirectPattern(rule.match_path);
    if (problem !== undefined || 'problem' in compiled) {
      throw new Error(`route ${routeId}: redirect_rules[${i}].${problem?.field ?? 'match_path'}: ${problem?.message ?? ('problem' in compiled ? compiled.problem : '')}`);
    }
    return { toHttps: rule.type === 'http_to_https', status: rule.status_code, re: compiled.re, target: rule.redirect_to };
  });
}

/** The endpoint's redirects, or null when it has none. */
export function compileRedirects(e: EndpointSnapshot): RequestPolicy | null {
  const toHttps = e.tls_config.http_to_https_redirect;
  const byRoute = new Map<string, CompiledRule[]>();
  for (const r of e.routes) if (r.enabled && r.redirect_rules.length > 0) byRoute.set(r.id, compileRules(r.id, r.redirect_rules));
  if (!toHttps && byRoute.size === 0) return null;
  return (ctx) => {
    if (toHttps && !ctx.secure) {
      const method = ctx.req.method;
      return redirect(method === 'GET' || method === 'HEAD' ? 301 : 308, httpsUrl(ctx));
    }
    const rules = byRoute.get(ctx.routeId);
    if (rules === undefined) return null;
    for (const rule of rules) {
      const m = rule.re.exec(ctx.path);
      if (m === null) continue;
      if (rule.toHttps) {
        if (ctx.secure) continue;
        return redirect(rule.status, httpsUrl(ctx));
      }
      const location = expandRedirectTarget(rule.target, m);
      return redirect(rule.status, location.includes('?') || ctx.rawQuery === '' ? location : `${location}?${ctx.rawQuery}`);
    }
    return null;
  };
}
