// The Notification record of document 1 §2, also its presenter (plus its
// category, so a client can tell which preference governs it).
import { z } from 'zod';
import { timestamp, timestampOrNull } from '../http/schemas.ts';
import { NOTIFICATION_CATEGORIES, NOTIFICATION_PRIORITIES, NOTIFICATION_TYPE_NAMES } from './notification.entity.ts';

export const notificationRecord = z.object({
  id: z.uuid(),
  type: z.enum(NOTIFICATION_TYPE_NAMES),
  category: z.enum(NOTIFICATION_CATEGORIES),
  priority: z.enum(NOTIFICATION_PRIORITIES),
  title: z.string(),
  body: z.string(),
  is_read: z.boolean(),
  read_at: timestampOrNull(),
  expires_at: timestampOrNull(),
  created_at: timestamp(),
});
