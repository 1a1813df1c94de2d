// Ordered list of schema migrations. Hand-written SQL, so the same statements
// run on PGlite and PostgreSQL; a test checks the entities match the result.
import type { MigrationObject } from '@mikro-orm/core';
import { Migration0001Foundation } from './0001-foundation.ts';
import { Migration0002Auth } from './0002-auth.ts';
import { Migration0003UserSearch } from './0003-user-search.ts';
import { Migration0005BillingModel } from './0005-billing-model.ts';
import { Migration0004Jobs } from './0004-jobs.ts';
import { Migration0006Profiles } from './0006-profiles.ts';
import { Migration0007PaymentMethods } from './0007-payment-methods.ts';
import { Migration0008Notifications } from './0008-notifications.ts';
import { Migration0009ExportAndDeletion } from './0009-export-and-deletion.ts';
import { Migration0010BillingCatalog } from './0010-billing-catalog.ts';
import { Migration0011BillingEngine } from './0011-billing-engine.ts';
import { Migration0012CdnCore } from './0012-cdn-core.ts';
import { Migration0013CdnAdmin } from './0013-cdn-admin.ts';
import { Migration0014CdnPolicies } from './0014-cdn-policies.ts';
import { Migration0015CdnDomains } from './0015-cdn-domains.ts';
import { Migration0016CdnLogDrains } from './0016-cdn-log-drains.ts';
import { Migration0018CdnListIndexes } from './0018-cdn-list-indexes.ts';
import { Migration0019CdnAcme } from './0019-cdn-acme.ts';
import { Migration0020CdnListSearch } from './0020-cdn-list-search.ts';
import { Migration0021ConfigVersions } from './0021-config-versions.ts';
import { Migration0022EdgeChannel } from './0022-edge-channel.ts';
import { Migration0023EdgeAgentTokens } from './0023-edge-agent-tokens.ts';
import { Migration0024PurgeAckCounts } from './0024-purge-ack-counts.ts';
import { Migration0025ApiTokenAuthNotify } from './0025-api-token-auth-notify.ts';
import { Migration0026BillingPrepaidValue } from './0026-billing-prepaid-value.ts';
import { Migration0027ApiTokenIssuerRoles } from './0027-api-token-issuer-roles.ts';

export const migrationsList: MigrationObject[] = [
  { name: '0001-foundation', class: Migration0001Foundation },
  { name: '0002-auth', class: Migration0002Auth },
  { name: '0003-user-search', class: Migration0003UserSearch },
  { name: '0004-jobs', class: Migration0004Jobs },
  { name: '0005-billing-model', class: Migration0005BillingModel },
  { name: '0006-profiles', class: Migration0006Profiles },
  { name: '0007-payment-methods', class: Migration0007PaymentMethods },
  { name: '0008-notifications', class: Migration0008Notifications },
  { name: '0009-export-and-deletion', class: Migration0009ExportAndDeletion },
  { name: '0010-billing-catalog', class: Migration0010BillingCatalog },
  { name: '0011-billing-engine', class: Migration0011BillingEngine },
  { name: '0012-cdn-core', class: Migration0012CdnCore },
  { name: '0013-cdn-admin', class: Migration0013CdnAdmin },
  { name: '0014-cdn-policies', class: Migration0014CdnPolicies },
  { name: '0015-cdn-domains', class: Migration0015CdnDomains },
  { name: '0016-cdn-log-drains', class: Migration0016CdnLogDrains },
  { name: '0018-cdn-list-indexes', class: Migration0018CdnListIndexes },
  { name: '0019-cdn-acme', class: Migration0019CdnAcme },
  { name: '0020-cdn-list-search', class: Migration0020CdnListSearch },
  { name: '0021-config-versions', class: Migration0021ConfigVersions },
  { name: '0022-edge-channel', class: Migration0022EdgeChannel },
  { name: '0023-edge-agent-tokens', class: Migration0023EdgeAgentTokens },
  { name: '0024-purge-ack-counts', class: Migration0024PurgeAckCounts },
  { name: '0025-api-token-auth-notify', class: Migration0025ApiTokenAuthNotify },
  { name: '0026-billing-prepaid-value', class: Migration0026BillingPrepaidValue },
  { name: '0027-api-token-issuer-roles', class: Migration0027ApiTokenIssuerRoles },
];
