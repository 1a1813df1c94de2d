// What notifications holds about a user (core/personal-data.ts): their
// in-app notifications, exported as the API shows them and deleted at erasure.
import type { PersonalDataProvider } from '../core/personal-data.ts';
import { notificationRecord } from './notification-record.ts';
import { Notification } from './notification.entity.ts';

export const notificationsPersonalData: PersonalDataProvider = {
  name: 'notifications',

  async export(rc, userId) {
    const rows = await rc.em.find(Notification, { user: userId }, { orderBy: { created_at: 'asc', id: 'asc' } });
    return rows.map((row) => notificationRecord.parse(row));
  },

  async erase(rc, subject) {
    await rc.em.nativeDelete(Notification, { user: subject.userId });
  },
};
