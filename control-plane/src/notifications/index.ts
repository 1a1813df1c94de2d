// The notifications capability: the in-app notification record, the
// subscriber's list and read/unread routes, and notify(), the one service
// account, auth, admin and billing events go through. Above accounts (it
// reads the User's notification preferences), below auth, admin and billing.
import { Notification } from './notification.entity.ts';
import { notificationRoutes } from './routes.ts';

export { notify, type NotifyInput, type NotifyResult } from './notify.ts';

export const notifications = {
  name: 'notifications',
  entities: [Notification],
  routes: notificationRoutes,
};
