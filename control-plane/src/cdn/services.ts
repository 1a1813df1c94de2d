// What the CDN capability adds to the platform's services, and the route
// declaration of its routes.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { HostLookup } from './origin-host.ts';
import type { CertificateIssuer } from './certificate-issuer.ts';
import type { DomainResolver } from './domain-dns.ts';
import type { TrustStore } from './certificate-trust.ts';
import type { HealthStatus } from './cdn.entities.ts';

/** An origin's health as the edge nodes measured it (document 3 §2 "Origin health", without origin_id). */
export interface OriginHealthReading {
  status: HealthStatus;
  latency_ms: number | null;
  last_success_at: Date | null;
  last_failure_at: Date | null;
  failure_reason: string | null;
  consecutive_failures: number;
  checked_at: Date | null;
}

export interface CdnServices extends CoreServices {
  /** Resolves an origin's host name at write time (the SSRF check); replaceable in tests. */
  cdnHostLookup: HostLookup;
  /** Looks up the DNS records of managed-certificate validation; replaceable in tests. */
  cdnDomainResolver: DomainResolver;
  /** The CAs a custom certificate must chain to (public roots, the system's store, CUSTOM_CERT_CA_FILE). */
  cdnCertificateTrust: TrustStore;
  /** Issues managed certificates (the internal CA without ACME_DIRECTORY_URL). */
  cdnCertificateIssuer: CertificateIssuer;
  /**
   * The worst case of an origin's health over the edge nodes online now, null when none reported it
   * (the control channel, edge-channel, provides it; without it every origin reads `unknown`).
   */
  cdnOriginHealth?: (originId: string) => Promise<OriginHealthReading | null>;
  /**
   * How many edge nodes a purge submitted now goes to (the control channel, edge-channel, provides it: the
   * nodes online); without it 0. Read on the submission's connection just before the statement that stores it.
   */
  cdnPurgeTargets?: PurgeTargetCount;
  /**
   * The shield regions: the regions of edge nodes willing to shield (the control channel, edge-channel, provides it). An endpoint's
   * shield_region must be one of them; without it (no control channel) any region id is accepted.
   */
  cdnShieldRegions?: () => Promise<string[]>;
}

/** Counts the edge nodes a purge stored now goes to, on the given entity manager (the submission's transaction, if any). */
export type PurgeTargetCount = (em: EntityManager) => Promise<number>;

/** Checks a shield_region against the shield regions (cdnShieldRegions). */
export type ShieldRegionCheck = CdnServices['cdnShieldRegions'];

export const defineCdnRoute = routesFor<CdnServices>();
