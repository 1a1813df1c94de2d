// A personal-data export of an account (document 1 §2 "Data export job",
// GDPR Art. 15/20): pending → processing → ready | failed. A background job
// writes the archive (a JSON file under DATA_DIR/exports/) and marks it ready
// with a 24-hour expiry; the signed download link is computed when read.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.entity.ts';

export const DATA_EXPORT_STATUSES = ['pending', 'processing', 'ready', 'failed'] as const;
export type DataExportStatus = (typeof DATA_EXPORT_STATUSES)[number];
/** Statuses of an export still being prepared: at most one per account. */
export const OPEN_DATA_EXPORT_STATUSES = ['pending', 'processing'] as const satisfies readonly DataExportStatus[];

export const DataExportSchema = defineEntity({
  name: 'DataExport',
  tableName: 'account_data_export',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    status: p.enum(DATA_EXPORT_STATUSES).default('pending'),
    requested_at: p.datetime(),
    completed_at: p.datetime().nullable(),
    /** When the download link stops working (24 h after the archive was ready). */
    expires_at: p.datetime().nullable(),
    /** The archive's name under DATA_DIR/exports/ (random); null before it is written and once it is removed. */
    file_name: p.string().length(64).nullable().hidden(),
    size_bytes: p.bigint('number').nullable(),
    /** Why it failed, in words fit for the user (the job keeps the technical error). */
    error: p.string().length(500).nullable(),
  },
  indexes: [
    { name: 'account_data_export_user_idx', properties: ['user', 'requested_at'] },
    // One export being prepared per account (document 1 part 8), held by the database.
    {
      name: 'account_data_export_one_open',
      expression: `create unique index "account_data_export_one_open" on "account_data_export" ("user_id") where status in ('pending', 'processing')`,
    },
    // The housekeeping sweep: ready archives past their expiry.
    { name: 'account_data_export_expiry_idx', expression: `create index "account_data_export_expiry_idx" on "account_data_export" ("expires_at") where file_name is not null` },
  ],
});
export class DataExport extends DataExportSchema.class {}
DataExportSchema.setClass(DataExport);
