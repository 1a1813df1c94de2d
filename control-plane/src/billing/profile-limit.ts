// The profile limit accounts asks for (accounts/services.ts ProfileLimit):
// the highest max_profiles among the user's live subscriptions (each carries
// the terms it was sold with), 1 when the user has none.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ProfileLimit } from '../accounts/index.ts';
import { LIVE_SUBSCRIPTION_STATUSES } from './billing.entities.ts';

export const DEFAULT_PROFILE_LIMIT = 1;

export const highestProfileLimit: ProfileLimit = async (em: EntityManager, userId: string) => {
  const [row] = await em.execute<{ max_profiles: number | null }[]>(
    `select max(max_profiles)::int as max_profiles from billing_subscription where user_id = ? and status in (${LIVE_SUBSCRIPTION_STATUSES.map(() => '?').join(', ')})`,
    [userId, ...LIVE_SUBSCRIPTION_STATUSES],
  );
  return Math.max(DEFAULT_PROFILE_LIMIT, row?.max_profiles ?? DEFAULT_PROFILE_LIMIT);
};
