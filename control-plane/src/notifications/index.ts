// The notifications capability: the in-app notification record, the
// subscriber's list and read/unread routes, and notify(), the one service
// account, auth, admin and billing events go through. Above accounts (it
// reads the User's notification preferences), below auth, admin and billing;
// it gives accounts its notices through notify() (accounts' notifyUser).
import type { AccountNotice } from '../accounts/index.ts';
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import { Notification } from './notification.entity.ts';
import { notify } from './notify.ts';
import { notificationsPersonalData } from './personal-data.ts';
import { notificationRoutes } from './routes.ts';

export { notify, type NotifyInput, type NotifyResult } from './notify.ts';

export const notifications = {
  name: 'notifications',
  entities: [Notification],
  routes: notificationRoutes,
  personalData: notificationsPersonalData,
  async start(core: CoreServices) {
    return { services: { notifyUser: async (rc: RequestContext, notice: AccountNotice) => void await notify(core, rc, notice) } };
  },
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { type NotificationType } from './notification.entity.ts';
export { notifyMany } from './notify.ts';
