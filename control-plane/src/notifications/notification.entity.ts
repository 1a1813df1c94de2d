// An in-app notification of a user (document 1 §2 "Notification"). Created
// only through notify(), which honours the user's notification preferences.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';

/** The preference categories of document 1 §2 ("Notification preferences"). */
export const NOTIFICATION_CATEGORIES = ['payment', 'new_content', 'account_security', 'marketing'] as const;
export type NotificationCategory = (typeof NOTIFICATION_CATEGORIES)[number];

export const NOTIFICATION_PRIORITIES = ['low', 'normal', 'high'] as const;
export type NotificationPriority = (typeof NOTIFICATION_PRIORITIES)[number];

/**
 * Every notification type the platform sends, with its category. The spec
 * names payment_failed; the others are the account-security events. A new
 * type is one line here (the column is plain text, no migration needed).
 */
export const NOTIFICATION_TYPES = {
  password_changed: 'account_security',
  password_reset: 'account_security',
  mfa_enabled: 'account_security',
  mfa_disabled: 'account_security',
  account_suspended: 'account_security',
  // A CDN role granted to an existing account (cdn-admin): access rights changed.
  cdn_role_granted: 'account_security',
  // What the user asked for, so it goes whatever the preferences: the export's link, the deletion's schedule.
  data_export_ready: 'account_security',
  account_deletion_requested: 'account_security',
  payment_failed: 'payment',
  // Subscription changes the subscriber did not make themselves (billing/subscription-transitions.ts).
  payment_succeeded: 'payment',
  subscription_canceled: 'payment',
  subscription_expired: 'payment',
  subscription_changed: 'payment',
} as const satisfies Record<string, NotificationCategory>;
export type NotificationType = keyof typeof NOTIFICATION_TYPES;
export const NOTIFICATION_TYPE_NAMES = Object.keys(NOTIFICATION_TYPES) as [NotificationType, ...NotificationType[]];

export const NotificationSchema = defineEntity({
  name: 'Notification',
  tableName: 'notification',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    type: p.string().length(64).$type<NotificationType>(),
    category: p.enum(NOTIFICATION_CATEGORIES),
    priority: p.enum(NOTIFICATION_PRIORITIES).default('normal'),
    title: p.string().length(200),
    body: p.text(),
    is_read: p.boolean().default(false),
    read_at: p.datetime().nullable(),
    expires_at: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  indexes: [
    // The list: one user's notifications, newest first (keyset on created_at, id).
    { name: 'notification_user_created_idx', properties: ['user', 'created_at', 'id'] },
    // unread_count on every list call: only the unread rows are indexed.
    { name: 'notification_user_unread_idx', expression: 'create index "notification_user_unread_idx" on "notification" ("user_id") where is_read = false' },
  ],
});
export class Notification extends NotificationSchema.class {}
NotificationSchema.setClass(Notification);
