// The configuration the cache-hit benchmark's agent runs (agent-server.ts) and
// what the driver needs to know of it (edge-cache-hit.ts). Three endpoints on
// one origin: bench.local (plain), policy.local (token authentication with one
// signing key, 1,000 IP rules none of which matches the client, and a response
// headers policy with four security headers and a custom header) and gz.local
// (compression on, every size); sig.local, ip.local and hdr.local (each of
// policy.local's policies alone); and localhost, bench.local's twin for the
// HTTPS clients: wrk and h2load send the URL's host as SNI, and the agent
// completes a handshake only for a name it serves.
export const BENCH_SIGNING_SECRET = 'bench-signing-secret-0123456789abcdef0123456789';

/** 1,000 block rules in 10.0.0.0/8, one /24 each, priorities 1..1000: the client (127.0.0.1) walks the tree and matches none. */
function benchIpRules(): { id: string; action: 'block'; cidr: string; priority: number }[] {
  return Array.from({ length: 1000 }, (_, i) => ({ id: `r${i}`, action: 'block' as const, cidr: `10.${i >> 8}.${i & 255}.0/24`, priority: i + 1 }));
}

export function benchSnapshot(originPort: number): unknown {
  // Origin ids are unique across the snapshot: one origin per endpoint, all the same server.
  const origins = (id: string) => [{ id, scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true }];
  return {
    version: 1,
    response_headers_policies: [{
      id: 'p', name: 'bench',
      security_headers: {
        strict_transport_security: { enabled: true, override: true, max_age_seconds: 31536000, include_subdomains: true, preload: false },
        x_content_type_options: { enabled: true, override: true },
        x_frame_options: { enabled: true, override: true, value: 'DENY' },
        referrer_policy: { enabled: true, override: true, value: 'strict-origin-when-cross-origin' },
      },
      custom_response_headers: [{ name: 'x-bench', value: 'policy', override: true }],
    }],
    endpoints: [
      { id: 'bench', hostname: 'bench.local', default_origin_id: 'o', origins: origins('o') },
      { id: 'tls', hostname: 'localhost', default_origin_id: 'ot', origins: origins('ot') },
      {
        id: 'policy', hostname: 'policy.local', default_origin_id: 'op', origins: origins('op'), response_headers_policy_id: 'p',
        signing_keys: [{ id: 'k', algorithm: 'HMAC-SHA256', secrets: [{ secret: BENCH_SIGNING_SECRET, valid_until: null }] }],
        ip_rules: benchIpRules(),
      },
      // Each policy of policy.local alone (the policy line's parts, 1 KiB only).
      {
        id: 'sig', hostname: 'sig.local', default_origin_id: 'os', origins: origins('os'),
        signing_keys: [{ id: 'ks', algorithm: 'HMAC-SHA256', secrets: [{ secret: BENCH_SIGNING_SECRET, valid_until: null }] }],
      },
      { id: 'ip', hostname: 'ip.local', default_origin_id: 'oi', origins: origins('oi'), ip_rules: benchIpRules() },
      { id: 'hdr', hostname: 'hdr.local', default_origin_id: 'oh', origins: origins('oh'), response_headers_policy_id: 'p' },
      {
        id: 'gz', hostname: 'gz.local', default_origin_id: 'og', origins: origins('og'),
        compression: { enabled: true, algorithms: ['br', 'gzip'], min_size_bytes: 0 },
      },
    ],
  };
}
