// The subscriber's notifications (document 1 §4.5; DESIGN.md §6).
import { z } from 'zod';
import type { CoreServices } from '../core/services.ts';
import { data, page, routesFor } from '../http/route.ts';
import { pageQuery, queryBoolean, uuid } from '../http/schemas.ts';
import { notificationRecord } from './notification-record.ts';
import { listNotifications, updateNotification } from './notification-service.ts';

const defineRoute = routesFor<CoreServices>();
const tags = ['Notifications'];

export const listNotificationsRoute = defineRoute({
  method: 'get', path: '/v1/notifications', tags,
  access: { permission: 'notifications.read', resourceType: 'user' },
  summary: 'List my notifications',
  description: 'Newest first; expired notifications are not listed. `unread_count` counts the caller\'s unread notifications whatever the filter.',
  query: pageQuery({ unread_only: queryBoolean().default(false) }),
  responses: { 200: page(notificationRecord, { extra: z.object({ unread_count: z.number().int().min(0) }) }) },
  async handler({ query, rc }) {
    return listNotifications(rc, query);
  },
});

export const updateNotificationRoute = defineRoute({
  method: 'patch', path: '/v1/notifications/:notif_id', tags,
  access: { permission: 'notifications.write', resourceType: 'user' },
  summary: 'Mark a notification read or unread',
  description: 'Owner only: another user\'s notification is 404. `read_at` is set when first marked read and cleared when marked unread.',
  params: z.strictObject({ notif_id: uuid() }),
  body: z.strictObject({ is_read: z.boolean() }),
  responses: { 200: data(notificationRecord) },
  async handler({ params, body, rc }) {
    return updateNotification(rc, params.notif_id, body);
  },
});

export const notificationRoutes = [listNotificationsRoute, updateNotificationRoute];
