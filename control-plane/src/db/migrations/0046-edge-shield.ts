import { Migration } from '@mikro-orm/migrations';

// Origin shield (issue 23 item 5): what an edge node says in Hello about
// shielding (the address other agents reach it at; empty: it does not
// shield) and how its region is shown (name, country, city), and what it
// measured in its heartbeats to the shield nodes of other regions (region →
// milliseconds), for GET /v1/cdn/shield-regions.
export class Migration0046EdgeShield extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_edge_node
      add column shield_address text null,
      add column region_name text null,
      add column region_country_code text null,
      add column region_city text null,
      add column shield_latencies jsonb not null default '{}'::jsonb`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_edge_node drop column shield_address, drop column region_name, drop column region_country_code,
      drop column region_city, drop column shield_latencies`);
  }
}
