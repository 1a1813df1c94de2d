// The billing capability: plans and subscriptions (document 1 §2–4.3, 4.7–4.8).
// Today its model, on which accounts' rules already stand (the profile limit,
// cancellation at account deletion); the routes and the billing engine follow.
import { Plan, Subscription } from './billing.entities.ts';
import { highestProfileLimit } from './profile-limit.ts';

export const billing = {
  name: 'billing',
  entities: [Plan, Subscription],
  async start() {
    // Accounts' profile limit comes from the plans the user subscribes to.
    return { services: { profileLimit: highestProfileLimit } };
  },
};
