// The capabilities of the control plane, each one folder exporting one module
// (its entities, routes and, where it adds services, a start hook). Adding a
// capability is one folder and one line here.
import type { EntityClass } from '@mikro-orm/core';
import type { Registry } from 'prom-client';
import { accounts, type AccountsServices } from './accounts/index.ts';
import { admin } from './admin/index.ts';
import { AuditEntry } from './audit/audit-entry.entity.ts';
import { auditPersonalData } from './audit/personal-data.ts';
import { auth, type AuthServices } from './auth/index.ts';
import { billing, type BillingServices } from './billing/index.ts';
import { cdn, type CdnServices } from './cdn/index.ts';
import { cdnAdmin } from './cdn-admin/index.ts';
import { cdnAnalytics, type AnalyticsServices } from './cdn-analytics/index.ts';
import { cdnConfig, type CdnConfigServices } from './cdn-config/index.ts';
import { edgeChannel, type EdgeChannelServices } from './edge-channel/index.ts';
import type { PersonalDataProvider } from './core/personal-data.ts';
import { Deployment } from './db/deployment.ts';
import type { CoreServices } from './core/services.ts';
import { health, type HealthServices } from './health/index.ts';
import { notifications } from './notifications/index.ts';
import type { RouteDefinition } from './http/route.ts';
import type { AccessControl } from './http/services.ts';
import { Job, JobSchedule, type JobDefinition, type JobServices } from './jobs/index.ts';
import { jobPersonalData } from './jobs/personal-data.ts';

/** Everything the capabilities' services may reach: the platform's and those capabilities add. */
export type AppServices = CoreServices & JobServices & AccountsServices & AuthServices & BillingServices & CdnServices & CdnConfigServices & EdgeChannelServices & HealthServices & AnalyticsServices;

export interface CapabilityStart {
  /** Services the capability adds for the others (merged into AppServices). */
  services?: Partial<AppServices>;
  /** The guard of every route (one capability provides it: auth). */
  access?: AccessControl;
  close?: () => Promise<void>;
  /** Registers the capability's own Prometheus metrics on the control plane's /metrics registry. */
  metrics?: (registry: Registry) => void;
}

export interface Capability {
  name: string;
  entities?: readonly EntityClass<object>[];
  routes?: readonly RouteDefinition<AppServices>[];
  /** Background job types (recurring ones included); the composition root registers them. */
  jobs?: readonly JobDefinition<any, AppServices>[];
  /** What the capability holds about a user, for the data export and the account erasure (core/personal-data.ts). */
  personalData?: PersonalDataProvider<AppServices>;
  /** Runs once the platform services exist, in list order. */
  start?: (services: AppServices) => Promise<CapabilityStart>;
}

export const capabilities: readonly Capability[] = [accounts, notifications, auth, billing, admin, cdn, cdnAdmin, cdnAnalytics, cdnConfig, edgeChannel, health];

/** Every entity of the control plane: the framework's own (audit, jobs, the deployment's identity) and each capability's. */
export const entities: EntityClass<object>[] = [AuditEntry, Job, JobSchedule, Deployment, ...capabilities.flatMap((c) => c.entities ?? [])];

/** Every API route, in capability order. */
export const routes: RouteDefinition<AppServices>[] = capabilities.flatMap((c) => c.routes ?? []);

/**
 * Every holder of personal data: each capability's provider, in capability
 * order, then the framework's tables that copy it (the audit trail, job
 * payloads). The export walks them in this order; the erasure in reverse.
 */
export const personalData: PersonalDataProvider<AppServices>[] = [
  ...capabilities.flatMap((c) => (c.personalData ? [c.personalData] : [])),
  auditPersonalData,
  jobPersonalData,
];

/** Every background job type, in capability order. */
export const jobs: JobDefinition<any, AppServices>[] = capabilities.flatMap((c) => c.jobs ?? []);
