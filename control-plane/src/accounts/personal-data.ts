// What the accounts capability holds about a user, for the data export and
// the erasure (core/personal-data.ts): the User record, the avatar file, the
// viewing profiles with their watchlist and progress, the deletion requests
// and the data exports (their archives on disk too).
import type { PersonalDataProvider } from '../core/personal-data.ts';
import { avatarFileName, readAvatar, removeAvatar } from './avatar-service.ts';
import { DataExport } from './data-export.entity.ts';
import { removeArchive } from './data-export-service.ts';
import { DeletionRequest } from './deletion-request.entity.ts';
import { profileRecord } from './profile-record.ts';
import { Profile, ProfileProgress, ProfileWatchlistItem } from './profile.entity.ts';
import type { AccountsServices } from './services.ts';
import { userRecord } from './user-record.ts';
import { defaultNotificationPreferences, User } from './user.entity.ts';

/** The e-mail address an erased account keeps: unique, unroutable (RFC 2606 `.invalid`), naming nobody. */
export const tombstoneEmail = (userId: string) => `deleted+${userId}@invalid`;

const accountRecord = userRecord.omit({ roles: true });

export const accountsPersonalData: PersonalDataProvider<AccountsServices> = {
  name: 'account',

  async export(rc, userId, app) {
    const user = await rc.em.findOneOrFail(User, userId);
    const avatarName = avatarFileName(user.avatar_url);
    const avatar = avatarName ? await readAvatar(app, avatarName) : undefined;
    const profiles = await rc.em.find(Profile, { user: userId }, { orderBy: { is_primary: 'desc', created_at: 'asc', id: 'asc' } });
    const profileIds = profiles.map((p) => p.id);
    const watchlist = profileIds.length ? await rc.em.find(ProfileWatchlistItem, { profile: { $in: profileIds } }, { orderBy: { created_at: 'asc' } }) : [];
    const progress = profileIds.length ? await rc.em.find(ProfileProgress, { profile: { $in: profileIds } }, { orderBy: { updated_at: 'asc' } }) : [];
    const deletions = await rc.em.find(DeletionRequest, { user: userId }, { orderBy: { requested_at: 'asc' } });
    const exports = await rc.em.find(DataExport, { user: userId }, { orderBy: { requested_at: 'asc' } });
    return {
      user: { ...accountRecord.parse(user), suspended_reason: user.suspended_reason ?? null },
      avatar: avatar ? { media_type: avatar.contentType, data_base64: avatar.body.toString('base64') } : null,
      profiles: profiles.map((profile) => ({
        ...profileRecord.parse(profile),
        watchlist: watchlist.filter((w) => w.profile.id === profile.id).map((w) => ({ content_id: w.content_id, added_at: w.created_at })),
        progress: progress.filter((p) => p.profile.id === profile.id).map((p) => ({
          content_id: p.content_id, series_id: p.series_id ?? null, position_seconds: p.position_seconds,
          duration_seconds: p.duration_seconds ?? null, completed: p.completed, updated_at: p.updated_at,
        })),
      })),
      deletion_requests: deletions.map((d) => ({
        id: d.id, status: d.status, reason: d.reason ?? null, requested_at: d.requested_at,
        scheduled_deletion_at: d.scheduled_deletion_at, canceled_at: d.canceled_at ?? null, completed_at: d.completed_at ?? null,
      })),
      data_exports: exports.map((e) => ({
        id: e.id, status: e.status, requested_at: e.requested_at, completed_at: e.completed_at ?? null, expires_at: e.expires_at ?? null,
      })),
    };
  },

  async identifiers(rc, userId) {
    const user = await rc.em.findOne(User, userId);
    if (!user) return [];
    const profiles = await rc.em.find(Profile, { user: userId });
    return [user.email, user.display_name, user.phone, ...profiles.map((p) => p.name)].filter((v): v is string => Boolean(v));
  },

  async erase(rc, subject, app) {
    const { userId } = subject;
    const user = await rc.em.findOne(User, userId);
    if (!user) return;
    const avatar = avatarFileName(user.avatar_url);
    if (avatar) await removeAvatar(app.config.dataDir, avatar);
    for (const exp of await rc.em.find(DataExport, { user: userId })) await removeArchive(app.config.dataDir, exp.file_name);
    await rc.em.nativeDelete(DataExport, { user: userId });
    // Their watchlist and progress go with them (on delete cascade).
    await rc.em.nativeDelete(Profile, { user: userId });
    await rc.em.nativeUpdate(DeletionRequest, { user: userId }, { reason: null });
    rc.em.assign(user, {
      status: 'deleted',
      email: tombstoneEmail(userId),
      email_verified: false,
      password_hash: null,
      display_name: null,
      phone: null,
      phone_verified: false,
      locale: null,
      timezone: null,
      country_code: null,
      preferred_language: null,
      mfa_enabled: false,
      totp_secret_encrypted: null,
      totp_pending_secret_encrypted: null,
      totp_last_step: null,
      recovery_codes_generated_at: null,
      notification_preferences: { ...defaultNotificationPreferences },
      avatar_url: null,
      terms_accepted_at: null,
      last_login_at: null,
      suspended_reason: null,
    } as never);
    await rc.em.flush();
  },
};
