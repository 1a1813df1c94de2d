// The one way the platform tells a user something (document 1 §6): account,
// auth and billing events call notify(). It honours the user's notification
// preferences — an opted-out category gets nothing, account_security is
// always delivered — records the in-app notification in the caller's unit of
// work, and sends the e-mail where the category calls for one, after the
// response (app.deferred), so mail neither slows nor fails the operation.
import { defaultNotificationPreferences, User } from '../accounts/index.ts';
import type { CoreServices } from '../core/services.ts';
import { afterCommit, type RequestContext } from '../core/request-context.ts';
import { deliver } from '../mail/deliver.ts';
import { notificationEmail, type EmailContent } from '../mail/templates.ts';
import {
  Notification, NOTIFICATION_TYPES, type NotificationCategory, type NotificationPriority, type NotificationType,
} from './notification.entity.ts';

export type NotifyServices = Pick<CoreServices, 'mailer' | 'log' | 'deferred'>;

export interface NotifyInput {
  userId: string;
  type: NotificationType;
  /** Defaults to the type's category (NOTIFICATION_TYPES). */
  category?: NotificationCategory;
  priority?: NotificationPriority;
  title: string;
  body: string;
  /** The e-mail, where the category sends one; without it, one is made of the title and body. */
  email?: EmailContent;
  /** After this the notification is no longer listed. */
  expiresAt?: Date;
}

export interface NotifyResult {
  /** The in-app record; null when the user opted out of the category (or the account is gone). */
  notification: Notification | null;
  /** Whether an e-mail was handed off. */
  emailed: boolean;
}

/**
 * Whether a category is e-mailed as well as shown in the app, once the user
 * takes the category at all: account_security always (a changed password or
 * a suspension must reach the owner even when nobody is logged in); payment
 * and marketing when opted in; new_content stays in the app (announcements
 * per title would flood a mailbox).
 */
export const EMAIL_BY_CATEGORY: Record<NotificationCategory, boolean> = {
  account_security: true,
  payment: true,
  marketing: true,
  new_content: false,
};

/** Whether the user takes notifications of the category: account_security always. */
export function acceptsCategory(preferences: Partial<Record<NotificationCategory, boolean>> | null | undefined, category: NotificationCategory): boolean {
  if (category === 'account_security') return true;
  return { ...defaultNotificationPreferences, ...preferences }[category];
}

/**
 * Notifies a user. The in-app record joins the request's unit of work and is
 * committed with it here (rc.em is flushed), so call it where the triggering
 * change would be flushed — outside a transaction, or inside one (through
 * inTransaction's context): the change and its notification commit together,
 * and the e-mail is handed off only once they have (afterCommit).
 */
export async function notify(app: NotifyServices, rc: RequestContext, input: NotifyInput): Promise<NotifyResult> {
  return (await notifyMany(app, rc, [input]))[0]!;
}

/** Notifies several users at once (the billing clock's batches): one read of the users, one flush. */
export async function notifyMany(app: NotifyServices, rc: RequestContext, inputs: readonly NotifyInput[]): Promise<NotifyResult[]> {
  const users = new Map((await rc.em.find(User, { id: { $in: [...new Set(inputs.map((i) => i.userId))] } })).map((u) => [u.id, u]));
  const results = inputs.map((input): NotifyResult & { mail?: () => void } => {
    const category = input.category ?? NOTIFICATION_TYPES[input.type];
    const user = users.get(input.userId);
    if (!user || user.status === 'deleted' || !acceptsCategory(user.notification_preferences, category)) return { notification: null, emailed: false };
    const notification = rc.em.create(Notification, {
      user,
      type: input.type,
      category,
      priority: input.priority ?? 'normal',
      title: input.title,
      body: input.body,
      expires_at: input.expiresAt ?? null,
    } as never);
    if (!EMAIL_BY_CATEGORY[category]) return { notification, emailed: false };
    const to = user.email;
    const content = input.email ?? notificationEmail({ title: input.title, body: input.body, displayName: user.display_name ?? undefined });
    return { notification, emailed: true, mail: () => app.deferred.defer(`notification-mail:${input.type}`, () => deliver(app, to, content), rc.log) };
  });
  await rc.em.flush();
  return results.map(({ mail, ...result }) => {
    if (mail) afterCommit(rc, mail);
    return result;
  });
}
