// Personal-data export (document 1 §4.1, part 8; GDPR Art. 15/20; DESIGN.md
// §5): the subscriber asks for an export (one being prepared at a time), a
// background job gathers what every personal-data provider holds about them
// into one JSON archive under DATA_DIR/exports/, marks the export ready with
// a 24-hour expiry and tells them (in the app and by e-mail, with the signed
// link). The link is served by a public route that checks the signature and
// the expiry against the clock; expired archives are deleted by the
// housekeeping job.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { LockMode, UniqueConstraintViolationException } from '@mikro-orm/core';
import { z } from 'zod';
import { HOUR, MINUTE, SECOND } from '../core/clock.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, callerUserId as callerUserIdOf } from '../http/errors.ts';
import { jobsFor, type JobRun } from '../jobs/index.ts';
import { dataExportReady } from '../mail/templates.ts';
import { exportLinkUrl, EXPORT_LINK_KEY_PURPOSE, signExportLink, verifyExportLink } from './data-export-link.ts';
import { DataExport, OPEN_DATA_EXPORT_STATUSES } from './data-export.entity.ts';
import type { AccountsServices } from './services.ts';
import { User } from './user.entity.ts';

/** How long the download link of a ready export works (document 1 part 8). */
export const EXPORT_LINK_LIFETIME_MS = 24 * HOUR;
/** Attempts of the export job before the export is marked failed. */
export const EXPORT_ATTEMPTS = 3;
/** An export still pending or processing this long after it was asked for is marked failed (its job was lost). */
export const STALE_EXPORT_MS = 6 * HOUR;
/** Archive format, named in the file so readers know what they hold. */
export const EXPORT_FORMAT = 'streaming-platform.personal-data-export';
export const EXPORT_FORMAT_VERSION = 1;

/** Names the archive store hands out: 128 random bits; nothing else is ever read or deleted. */
const EXPORT_FILE_NAME = /^[0-9a-f]{32}\.json$/;
export const exportDir = (dataDir: string) => path.join(dataDir, 'exports');

const FAILED_MESSAGE = 'The export could not be prepared. Please request a new one.';

const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Data exports belong to user accounts');

/** An export as the API shows it: with its signed link while it is ready and not expired by the clock. */
export function presentDataExport(app: AccountsServices, exp: DataExport): DataExport & { download_url: string | null } {
  const usable = exp.status === 'ready' && exp.file_name && exp.expires_at && exp.expires_at.getTime() > app.clock.now().getTime();
  const download_url = usable ? exportLinkUrl(app.config.publicUrl, signExportLink(app.deriveKey(EXPORT_LINK_KEY_PURPOSE), exp.id, exp.expires_at!)) : null;
  // A copy, not a prototype link: objects of one shape keep the record's parse fast.
  return { ...exp, download_url } as DataExport & { download_url: string | null };
}

/**
 * Starts an export of the caller's data (document 1 §4.1): one being prepared
 * per account, so a second request while one is pending or processing is
 * 409 CONFLICT (the database's partial unique index holds it under races).
 * The job is enqueued in the same transaction as the export row.
 */
export async function requestDataExport(app: AccountsServices, rc: RequestContext): Promise<DataExport> {
  const userId = callerUserId(rc);
  const refused = () => new ApiError('CONFLICT', 'An export of this account is already being prepared; follow it with GET /v1/users/me/data-export');
  try {
    return await inTransaction(rc, async (tx) => {
      if (await tx.em.count(DataExport, { user: userId, status: { $in: [...OPEN_DATA_EXPORT_STATUSES] } }) > 0) throw refused();
      const exp = tx.em.create(DataExport, { user: userId, status: 'pending', requested_at: app.clock.now() } as never);
      await tx.em.flush();
      await app.jobs.enqueue(dataExportJob, { export_id: exp.id }, { uniqueKey: `export:${exp.id}`, em: tx.em });
      return exp;
    });
  } catch (error) {
    if (error instanceof UniqueConstraintViolationException) throw refused();
    throw error;
  }
}

/** The caller's latest export (document 1 §4.1: "polls the latest job"); 404 when they never asked for one. */
export async function latestDataExport(rc: RequestContext): Promise<DataExport> {
  const exp = await rc.em.findOne(DataExport, { user: callerUserId(rc) }, { orderBy: { requested_at: 'desc', id: 'desc' } });
  if (!exp) throw new ApiError('NOT_FOUND', 'No data export has been requested');
  return exp;
}

// ---- the archive ---------------------------------------------------------------

/** The archive: every provider's section, named by the provider. */
export async function buildArchive(app: AccountsServices, rc: RequestContext, exp: { id: string; userId: string }): Promise<Record<string, unknown>> {
  const sections: Record<string, unknown> = {};
  for (const provider of app.personalData) {
    if (!provider.export) continue;
    sections[provider.name] = await provider.export(rc, exp.userId, app);
  }
  return {
    format: EXPORT_FORMAT,
    format_version: EXPORT_FORMAT_VERSION,
    export_id: exp.id,
    user_id: exp.userId,
    generated_at: app.clock.now().toISOString(),
    sections,
  };
}

/** Writes an archive under a new random name, readable by this process's user only (written aside, then renamed). */
async function writeArchive(dataDir: string, archive: unknown): Promise<{ name: string; size: number }> {
  const dir = exportDir(dataDir);
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  const name = `${randomBytes(16).toString('hex')}.json`;
  const bytes = Buffer.from(JSON.stringify(archive, null, 2));
  const partial = path.join(dir, `.${name}.partial`);
  await fs.writeFile(partial, bytes, { mode: 0o600 });
  await fs.rename(partial, path.join(dir, name));
  return { name, size: bytes.length };
}

/** Deletes an archive file (a missing one is fine: the result is the same). */
export async function removeArchive(dataDir: string, name: string | null | undefined): Promise<void> {
  if (!name || !EXPORT_FILE_NAME.test(name)) return;
  await fs.rm(path.join(exportDir(dataDir), name), { force: true });
}

/**
 * The export job: pending → processing (committed, so polls see it) → the
 * archive written → ready with its expiry, the notification and its e-mail in
 * one transaction. A failed attempt is retried; the last one marks the export
 * failed. An export that is gone (its account was erased meanwhile) or no
 * longer pending is left alone, and an archive written for it is removed.
 */
export async function runDataExport(app: AccountsServices, rc: RequestContext, exportId: string, run: Pick<JobRun, 'attempt'>): Promise<void> {
  const exp = await rc.em.findOne(DataExport, exportId);
  if (!exp || !(OPEN_DATA_EXPORT_STATUSES as readonly string[]).includes(exp.status)) return;
  const userId = exp.user.id;
  exp.status = 'processing';
  await rc.em.flush();

  let written: { name: string; size: number } | undefined;
  try {
    written = await writeArchive(app.config.dataDir, await buildArchive(app, rc, { id: exportId, userId }));
    const name = written.name;
    const size = written.size;
    const ready = await inTransaction(rc, async (tx) => {
      const current = await tx.em.findOne(DataExport, exportId, { lockMode: LockMode.PESSIMISTIC_WRITE, refresh: true });
      if (!current || current.status !== 'processing') return false;
      const now = app.clock.now();
      current.status = 'ready';
      current.completed_at = now;
      current.expires_at = new Date(now.getTime() + EXPORT_LINK_LIFETIME_MS);
      current.file_name = name;
      current.size_bytes = size;
      current.error = null;
      const user = await tx.em.findOneOrFail(User, userId);
      const link = presentDataExport(app, current).download_url!;
      // Committed with the ready state (notify flushes the transaction's unit of work); the e-mail follows.
      await app.notifyUser(tx, {
        userId,
        type: 'data_export_ready',
        title: 'Your data export is ready',
        body: `The copy of your data you asked for is ready. Download it from your account within ${EXPORT_LINK_LIFETIME_MS / HOUR} hours.`,
        expiresAt: current.expires_at,
        email: dataExportReady({ downloadUrl: link, expiresInHours: EXPORT_LINK_LIFETIME_MS / HOUR, displayName: user.display_name ?? undefined }),
      });
      await tx.em.flush();
      return true;
    });
    if (!ready) await removeArchive(app.config.dataDir, name);
  } catch (error) {
    if (written) await removeArchive(app.config.dataDir, written.name).catch(() => {});
    if (run.attempt < EXPORT_ATTEMPTS) throw error;
    rc.log.error({ err: error, export_id: exportId }, 'data export failed on its last attempt');
    await markFailed(app, rc, exportId);
  }
}

async function markFailed(app: AccountsServices, rc: RequestContext, exportId: string): Promise<void> {
  const em = rc.em.fork();
  const exp = await em.findOne(DataExport, exportId);
  if (!exp || !(OPEN_DATA_EXPORT_STATUSES as readonly string[]).includes(exp.status)) return;
  exp.status = 'failed';
  exp.completed_at = app.clock.now();
  exp.error = FAILED_MESSAGE;
  await em.flush();
}

// ---- the download -----------------------------------------------------------------

const refusedLink = () => new ApiError('FORBIDDEN', 'This download link is invalid or has expired');

/**
 * Opens the archive a signed link names. Every refusal — a changed character,
 * an expired link, an export that is gone or not ready — is the same 403, so
 * the answer tells nothing about which part failed.
 */
export async function openDataExportDownload(app: AccountsServices, rc: RequestContext, presented: { exportId: string; expires: string; signature: string }): Promise<{ body: Readable; size: number; fileName: string }> {
  const expires = verifyExportLink(app.deriveKey(EXPORT_LINK_KEY_PURPOSE), presented, app.clock.now().getTime());
  if (expires === null) throw refusedLink();
  // The id was signed by us, so it is one of our uuids.
  const exp = await rc.em.findOne(DataExport, presented.exportId);
  if (!exp || exp.status !== 'ready' || !exp.file_name || !exp.expires_at || Math.floor(exp.expires_at.getTime() / 1000) !== expires) throw refusedLink();
  if (!EXPORT_FILE_NAME.test(exp.file_name)) throw refusedLink();
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(path.join(exportDir(app.config.dataDir), exp.file_name), 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw refusedLink();
    throw error;
  }
  const { size } = await handle.stat();
  const day = (exp.completed_at ?? exp.requested_at).toISOString().slice(0, 10);
  return { body: handle.createReadStream(), size, fileName: `personal-data-${day}.json` };
}

// ---- housekeeping ---------------------------------------------------------------

/** Deletes archives whose link expired, and fails exports whose job was lost; returns what it did. */
export async function sweepDataExports(app: AccountsServices, rc: RequestContext): Promise<{ removed: number; failed: number }> {
  const now = app.clock.now();
  const expired = await rc.em.find(DataExport, { file_name: { $ne: null }, expires_at: { $lte: now } }, { limit: 500 });
  for (const exp of expired) {
    await removeArchive(app.config.dataDir, exp.file_name);
    exp.file_name = null;
  }
  const stale = await rc.em.find(DataExport, {
    status: { $in: [...OPEN_DATA_EXPORT_STATUSES] },
    requested_at: { $lt: new Date(now.getTime() - STALE_EXPORT_MS) },
  }, { limit: 500 });
  for (const exp of stale) {
    exp.status = 'failed';
    exp.completed_at = now;
    exp.error = FAILED_MESSAGE;
  }
  await rc.em.flush();
  return { removed: expired.length, failed: stale.length };
}

// ---- the job ------------------------------------------------------------------------

const defineJob = jobsFor<AccountsServices>();

export const dataExportJob = defineJob({
  type: 'accounts.data-export',
  payload: z.object({ export_id: z.uuid() }),
  retry: { attempts: EXPORT_ATTEMPTS, baseDelayMs: 30 * SECOND, maxDelayMs: 10 * MINUTE },
  async handler(rc, { export_id }, app, run) {
    await runDataExport(app, rc, export_id, run);
  },
});
