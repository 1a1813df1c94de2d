// The subscriber's notifications (document 1 §4.5): the list with its unread
// count, and marking one read or unread. Expired notifications are gone for
// both. Only the owner sees or changes one (a global admin may change anyone's).
import type { FilterQuery } from '@mikro-orm/core';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { paginate, TOTAL_EXACT_UP_TO, type PageMeta } from '../http/paging.ts';
import { Notification } from './notification.entity.ts';

function callerId(rc: RequestContext): string {
  if (!rc.actor || rc.actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  return rc.actor.id;
}

/** Not expired at `now`. */
const live = (now: Date) => ({ $or: [{ expires_at: null }, { expires_at: { $gt: now } }] });

export interface NotificationListQuery {
  cursor?: string;
  limit: number;
  unread_only: boolean;
}

/** The caller's live notifications, newest first, and how many of them are unread. */
export async function listNotifications(rc: RequestContext, query: NotificationListQuery): Promise<{ items: Notification[]; meta: PageMeta; unread_count: number }> {
  const userId = callerId(rc);
  const now = new Date();
  const mine = { user: userId, ...live(now) };
  const unread = { ...mine, is_read: false };
  const page = await paginate(rc.em, Notification, {
    where: (query.unread_only ? unread : mine) as FilterQuery<Notification>,
    limit: query.limit,
    cursor: query.cursor,
    sort: { field: 'created_at', direction: 'desc' },
  });
  // With unread_only the page's total is the unread count while it is exact (http/paging.ts TOTAL_EXACT_UP_TO).
  const unread_count = query.unread_only && page.meta.total <= TOTAL_EXACT_UP_TO
    ? page.meta.total
    : await rc.em.count(Notification, unread as FilterQuery<Notification>);
  return { ...page, unread_count };
}

/** Marks a notification read (read_at: the first time) or unread (read_at cleared). */
export async function updateNotification(rc: RequestContext, id: string, input: { is_read: boolean }): Promise<Notification> {
  const userId = callerId(rc);
  const notification = await rc.em.findOne(Notification, { id, ...live(new Date()) } as FilterQuery<Notification>);
  // Another user's notification is not found, unless a global admin asks.
  if (!notification || (notification.user.id !== userId && rc.access !== 'global')) throw notFound('Notification');
  if (input.is_read && !notification.is_read) {
    notification.is_read = true;
    notification.read_at = new Date();
  } else if (!input.is_read) {
    notification.is_read = false;
    notification.read_at = null;
  }
  await rc.em.flush();
  return notification;
}
