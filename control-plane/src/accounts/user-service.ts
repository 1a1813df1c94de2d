// The subscriber's own account (document 1 §4.1): read and update.
import type { RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import type { UserRow } from './user-record.ts';
import { User, type NotificationPreferences } from './user.entity.ts';

/** The caller's own user, as an entity to change. */
export async function currentUser(rc: RequestContext): Promise<User> {
  if (!rc.actor || rc.actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  return rc.em.findOneOrFail(User, rc.actor.id);
}

/** The caller's own stored row, to read: the one authorization has just read, or a fresh read. */
export async function currentUserRow(rc: RequestContext): Promise<UserRow> {
  const actor = rc.actor;
  if (!actor || actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  if (actor.record?.id === actor.id) return actor.record as UserRow;
  const [row] = await rc.em.execute<UserRow[]>('select * from app_user where id = ?', [actor.id]);
  if (!row) throw new ApiError('NOT_FOUND', 'User not found');
  return row;
}

export interface UserUpdate {
  display_name?: string | null;
  phone?: string | null;
  locale?: string | null;
  timezone?: string | null;
  country_code?: string | null;
  preferred_language?: string | null;
  notification_preferences?: Partial<NotificationPreferences>;
}

/** Changes the given fields only; a new phone number is unverified until proven. */
export async function updateCurrentUser(rc: RequestContext, input: UserUpdate): Promise<User> {
  const user = await currentUser(rc);
  const { notification_preferences, ...fields } = input;
  if (fields.phone !== undefined && fields.phone !== user.phone) user.phone_verified = false;
  rc.em.assign(user, fields);
  if (notification_preferences) user.notification_preferences = { ...user.notification_preferences, ...notification_preferences };
  await rc.em.flush();
  return user;
}
