import { Migration } from '@mikro-orm/migrations';

// The CDN lists at size (bench/cdn-lists.ts; issue 11; docs/decisions.md,
// "Totals and search of the CDN lists at size").
//
// `q`: each searchable CDN table keeps its search document in a stored
// generated column, `search_document`, with the GIN index on the column (it
// was on the expression). A plan that walks another index (created_at, for the
// default order) then reads a column per row instead of recomputing
// to_tsvector + regexp_replace (~30 µs a row). The expressions are frozen
// copies of cdn/cdn.entities.ts's searchDocument (the same as 0012/0014/0016's).
//
// The CDN audit list: `action` holds machine identifiers (`origin.updated`) and
// is compared in the "C" collation, so one btree serves the exact action, the
// prefix glob (LIKE 'origin.%' becomes an index range only under "C") and
// ORDER BY action. That btree is partial, over the CDN scope (the resource types
// of cdn-admin/audit-scope.ts, frozen here; cdn-admin/audit-logs.test.ts checks
// the list query still uses it): sort=-action no longer walks past every
// account-side entry (`user.*`, `subscription.*` sort last). It replaces 0013's
// varchar_pattern_ops index and 0018's (action, id). (resource_type, action, id)
// serves one type sorted by action. The actor index gains (created_at, id), so
// an actor's entries come in list order, and includes resource_type and action,
// so counting an actor's CDN entries (with an action filter or not) reads the
// index alone.
const SEARCH_DOCUMENTS: [table: string, document: string][] = [
  ['cdn_endpoint', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || hostname || ' ' || regexp_replace(hostname, '[^[:alnum:]]+', ' ', 'g')) || jsonb_to_tsvector('simple'::regconfig, tags, '["string"]'::jsonb))`],
  ['cdn_origin', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || host || ' ' || regexp_replace(host, '[^[:alnum:]]+', ' ', 'g')) || jsonb_to_tsvector('simple'::regconfig, tags, '["string"]'::jsonb))`],
  ['cdn_route', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g')))`],
  ['cdn_cache_rule', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g')))`],
  ['cdn_response_headers_policy', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || description || ' ' || regexp_replace(description, '[^[:alnum:]]+', ' ', 'g')))`],
  ['cdn_log_drain', `(to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g')))`],
];

const CDN_AUDIT_SCOPE = `('endpoint', 'origin', 'route', 'cache_rule', 'purge_request', 'prefetch_job', 'custom_domain', 'certificate', 'response_headers_policy', `
  + `'signing_key', 'ip_rule', 'log_drain', 'config_version', 'edge_node', 'agent_token', 'admin_user', 'api_token')`;

export class Migration0020CdnListSearch extends Migration {
  override async up(): Promise<void> {
    for (const [table, document] of SEARCH_DOCUMENTS) {
      this.addSql(`drop index if exists ${table}_search_idx`);
      this.addSql(`alter table ${table} add column search_document tsvector generated always as (${document}) stored`);
      this.addSql(`create index ${table}_search_idx on ${table} using gin (search_document)`);
    }

    this.addSql(`drop index if exists audit_log_action_idx`);
    this.addSql(`drop index if exists audit_log_action_sort_idx`);
    this.addSql(`alter table audit_log alter column action type varchar(200) collate "C"`);
    this.addSql(`create index audit_log_cdn_action_idx on audit_log (action, id) where resource_type in ${CDN_AUDIT_SCOPE}`);
    this.addSql(`create index audit_log_resource_type_action_idx on audit_log (resource_type, action, id)`);
    this.addSql(`drop index if exists audit_log_actor_idx`);
    this.addSql(`create index audit_log_actor_created_at_idx on audit_log (actor_id, created_at desc, id desc) include (resource_type, action)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists audit_log_actor_created_at_idx`);
    this.addSql(`create index audit_log_actor_idx on audit_log (actor_id)`);
    this.addSql(`drop index if exists audit_log_resource_type_action_idx`);
    this.addSql(`drop index if exists audit_log_cdn_action_idx`);
    this.addSql(`alter table audit_log alter column action type varchar(200) collate "default"`);
    this.addSql(`create index audit_log_action_sort_idx on audit_log (action, id)`);
    this.addSql(`create index audit_log_action_idx on audit_log (action varchar_pattern_ops)`);

    for (const [table, document] of SEARCH_DOCUMENTS) {
      this.addSql(`drop index if exists ${table}_search_idx`);
      this.addSql(`alter table ${table} drop column if exists search_document`);
      this.addSql(`create index ${table}_search_idx on ${table} using gin (${document})`);
    }
  }
}
