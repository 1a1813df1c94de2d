// The request-side policies of an endpoint, compiled once per configuration in
// DESIGN.md §8's order (IP rules → geo restriction → signed URLs → redirects);
// the proxy runs them between endpoint lookup and the cache (proxy.ts).
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileGeoRestriction, packagedCountryDatabase, type CountryDatabase } from './geo.ts';
import type { RequestPolicy } from './index.ts';
import { compileIpRules } from './ip-rules.ts';
import { compileRedirects } from './redirects.ts';
import { compileSignedUrls } from './signed-urls.ts';

/** What request policies are compiled with besides the endpoint: the clock and the country database (tests give their own). */
export interface RequestPolicyEnvironment {
  now?: () => number;
  countries?: () => CountryDatabase;
}

/**
 * Per-endpoint request policies, compiled from the snapshot, in DESIGN.md §8's
 * order; only those the endpoint uses (an empty list costs one length check
 * per request). Throws on a setting the edge cannot enforce, so the whole
 * configuration is refused rather than served without it.
 */
export function compileRequestPolicies(endpoint: EndpointSnapshot, env: RequestPolicyEnvironment = {}): RequestPolicy[] {
  const now = env.now ?? Date.now;
  return [
    compileIpRules(endpoint, now),
    compileGeoRestriction(endpoint, env.countries ?? packagedCountryDatabase),
    compileSignedUrls(endpoint.signing_keys, now),
    compileRedirects(endpoint),
  ].filter((p): p is RequestPolicy => p !== null);
}
