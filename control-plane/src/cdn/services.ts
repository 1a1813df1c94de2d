// What the CDN capability adds to the platform's services, and the route
// declaration of its routes.
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { HostLookup } from './origin-host.ts';
import type { CertificateIssuer } from './certificate-issuer.ts';
import type { DomainResolver } from './domain-dns.ts';

export interface CdnServices extends CoreServices {
  /** Resolves an origin's host name at write time (the SSRF check); replaceable in tests. */
  cdnHostLookup: HostLookup;
  /** Looks up the DNS records of managed-certificate validation; replaceable in tests. */
  cdnDomainResolver: DomainResolver;
  /** Issues managed certificates (the internal CA without ACME_DIRECTORY_URL). */
  cdnCertificateIssuer: CertificateIssuer;
}

export const defineCdnRoute = routesFor<CdnServices>();
