// The Data export job record of document 1 §2, also its presenter. The spec
// leaves the link's field name open: `download_url` (DESIGN.md §5), set only
// while the export is ready and its link has not expired.
import { z } from 'zod';
import { orNull, timestamp, timestampOrNull } from '../http/schemas.ts';
import { DATA_EXPORT_STATUSES } from './data-export.entity.ts';

export const dataExportRecord = z.object({
  id: z.uuid(),
  status: z.enum(DATA_EXPORT_STATUSES).describe('pending → processing → ready | failed'),
  requested_at: timestamp(),
  completed_at: timestampOrNull(),
  expires_at: timestampOrNull().describe('When the download link stops working (24 hours after the export was ready)'),
  size_bytes: orNull(z.number().int()),
  download_url: orNull(z.string()).describe('Signed link to the JSON archive; set while the export is ready and not expired'),
  error: orNull(z.string()).describe('Why a failed export failed'),
});
