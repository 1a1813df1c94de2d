// The deployment's identity (issue 21 item 4): a random id written once into
// the one-row table `deployment` by migration 0032, so every process on this
// database (replicas, CLIs) derives the same namespace for its Redis keys and
// pub/sub channels, and another deployment sharing the Redis server (staging
// beside production, on another database) derives another. REDIS_NAMESPACE,
// when set, replaces it: a database restored from another deployment's dump
// carries that deployment's id, so one of the two must set it.
import { defineEntity, p } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Config } from '../config/config.ts';
import type { Database } from './orm.ts';

export const DeploymentSchema = defineEntity({
  name: 'Deployment',
  tableName: 'deployment',
  properties: {
    id: p.smallint().primary().autoincrement(false),
    deployment_id: p.uuid(),
    created_at: p.datetime(),
  },
});
export class Deployment extends DeploymentSchema.class {}
DeploymentSchema.setClass(Deployment);

/** The namespace of this deployment's Redis keys and channels: REDIS_NAMESPACE, or the database's deployment id. */
export async function deploymentNamespace(config: Pick<Config, 'REDIS_NAMESPACE'>, db: Database): Promise<string> {
  if (config.REDIS_NAMESPACE) return config.REDIS_NAMESPACE;
  const [row] = await (db.orm.em.fork() as EntityManager).execute<{ deployment_id: string }[]>(`select deployment_id from deployment where id = 1`);
  if (!row) throw new Error('The database has no deployment id (migration 0032 did not run)');
  return row.deployment_id;
}
