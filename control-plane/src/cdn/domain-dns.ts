// The DNS look-ups of managed-certificate validation: the domain's CNAME
// towards the endpoint's CDN hostname and the TXT record of the ACME
// challenge. A resolver interface so tests answer from a table; the default
// asks the system's resolvers through node:dns with a deadline, and treats
// every error (NXDOMAIN, no data, timeout) as no answer.
import { Resolver } from 'node:dns/promises';

export interface DomainResolver {
  /** CNAME targets of `name`, lower-cased without trailing dot ([] when none). */
  cname(name: string): Promise<string[]>;
  /** TXT records of `name`, each with its strings joined ([] when none). */
  txt(name: string): Promise<string[]>;
}

export const DNS_TIMEOUT_MS = 3_000;

export function systemDomainResolver(timeoutMs = DNS_TIMEOUT_MS): DomainResolver {
  const resolver = new Resolver({ timeout: timeoutMs, tries: 2 });
  return {
    cname: (name) => resolver.resolveCname(name).then((names) => names.map((n) => n.toLowerCase().replace(/\.$/, '')), () => []),
    txt: (name) => resolver.resolveTxt(name).then((records) => records.map((chunks) => chunks.join('')), () => []),
  };
}
