import { Migration } from '@mikro-orm/migrations';

// The deployment's identity (db/deployment.ts): one row with a random id,
// written once, from which every process on this database derives the
// namespace of its Redis keys and pub/sub channels (unless REDIS_NAMESPACE
// is set), so deployments sharing one Redis server never see each other's.
export class Migration0032DeploymentIdentity extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table deployment (
        id smallint primary key,
        deployment_id uuid not null,
        created_at timestamptz not null
      )`);
    this.addSql(`insert into deployment (id, deployment_id, created_at) values (1, gen_random_uuid(), now())`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists deployment`);
  }
}
