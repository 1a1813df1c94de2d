// Personal-data export (document 1 §4.1; DESIGN.md §6 `POST|GET
// /v1/users/me/data-export`) and the public download behind the signed link.
import { z } from 'zod';
import { bare, binary, data, reply } from '../http/route.ts';
import { dataExportRecord } from './data-export-record.ts';
import { latestDataExport, openDataExportDownload, presentDataExport, requestDataExport } from './data-export-service.ts';
import { defineAccountsRoute } from './services.ts';

const tags = ['Account'];

export const requestDataExportRoute = defineAccountsRoute({
  method: 'post', path: '/v1/users/me/data-export', tags,
  access: { permission: 'exports.write', resourceType: 'user', allowPendingDeletion: true },
  summary: 'Request an export of the current user\'s data',
  description: 'Accepted for background work (202): a JSON archive of everything held about the account is prepared, '
    + 'and its download link (valid 24 hours) is e-mailed to the account address and shown by GET when ready. '
    + 'One export is prepared at a time: while one is pending or processing, another request is 409 CONFLICT. At most 5 requests a day.',
  responses: { 202: bare(dataExportRecord) },
  errors: ['CONFLICT'],
  rateLimits: [{ name: 'data-export', limit: 5, windowSeconds: 24 * 3600, by: 'caller' }],
  async handler({ rc, app }) {
    return reply.accepted(presentDataExport(app, await requestDataExport(app, rc)));
  },
});

export const readDataExportRoute = defineAccountsRoute({
  method: 'get', path: '/v1/users/me/data-export', tags,
  access: { permission: 'exports.read', resourceType: 'user', allowPendingDeletion: true },
  summary: 'Read the status of the latest data export',
  description: 'The latest export; when ready and not expired it carries `download_url`, a signed link valid until `expires_at` (24 hours). 404 before any export was requested.',
  responses: { 200: data(dataExportRecord) },
  async handler({ rc, app }) {
    return presentDataExport(app, await latestDataExport(rc));
  },
});

export const downloadDataExportRoute = defineAccountsRoute({
  method: 'get', path: '/v1/data-exports/:export_id/download', tags,
  access: 'public',
  summary: 'Download a data export archive (the signed link)',
  description: 'The `download_url` of a ready export: no login needed, the signature is the authorization. '
    + 'A link that was changed in any way, has expired, or whose export is gone is refused with 403, whichever it is.',
  params: z.strictObject({ export_id: z.string().max(100) }),
  query: z.strictObject({ expires: z.string().max(20), signature: z.string().max(100) }),
  responses: { 200: binary(['application/json']) },
  errors: ['FORBIDDEN'],
  async handler({ params, query, rc, app }) {
    const archive = await openDataExportDownload(app, rc, { exportId: params.export_id, expires: query.expires, signature: query.signature });
    return reply.with(200, { contentType: 'application/json', body: archive.body }, {
      'content-disposition': `attachment; filename="${archive.fileName}"`,
      'content-length': String(archive.size),
    });
  },
});

export const dataExportRoutes = [requestDataExportRoute, readDataExportRoute, downloadDataExportRoute];
