// The table of fields covers every column of every configuration table (read
// from information_schema on a migrated database): each is published, kept by
// a rollback or listed as not published, so a column added by a migration
// cannot be left out of the edge's configuration or a rollback silently.
import t from 'tap';
import { createTestDatabase } from '../../../test/support/database.ts';
import { detectServices } from '../../../test/support/services.ts';
import { configurationTables, endpointFields, originFields, selectList, signingKeyFields, toEntry, toRow } from './snapshot-fields.ts';

t.test('every column of each configuration table is in its table of fields, kept or listed as not published; every listed column exists', async (t) => {
  const database = await createTestDatabase({ postgresUrl: (await detectServices()).postgresUrl });
  t.teardown(() => database.dispose());
  const rows = await database.db.orm.em.fork().getConnection().execute<{ table_name: string; column_name: string }[]>(
    `select table_name, column_name from information_schema.columns where table_schema = current_schema() and table_name like 'cdn\\_%'`,
  );
  for (const resource of configurationTables) {
    const columns = rows.filter((r) => r.table_name === resource.table).map((r) => r.column_name);
    t.ok(columns.length > 0, `${resource.table} exists`);
    const published = resource.fields.flatMap((f) => (f.column ? [f.column] : []));
    const listed = [...published, ...Object.keys(resource.kept), ...resource.unpublished];
    t.same(columns.filter((c) => !listed.includes(c)), [], `${resource.table}: no column is missing from the table of fields`);
    t.same(listed.filter((c) => !columns.includes(c)), [], `${resource.table}: every column the table of fields names exists`);
    t.equal(new Set(listed).size, listed.length, `${resource.table}: each column listed once`);
    t.ok(resource.fields.every((f) => !f.column || f.type), `${resource.table}: every column has its type for the restore`);
  }
});

t.test('the compile\'s select list and an entry in the table\'s order; a row back from the entry', async (t) => {
  t.equal(selectList(signingKeyFields), 'id, endpoint_id, algorithm, status, secret_sealed, retired_secrets, token_param, expires_param, ip_binding_enabled');
  const origin = {
    id: 'o1', distribution_id: 'e1', name: 'media', scheme: 'http', host: 'origin.example', port: null, path_prefix: '', enabled: true, health_check_url: null,
    health_check_interval_seconds: 30, verify_tls: true, allow_private_network: false, ssrf_protection: true, timeout_ms: 30000, connect_timeout_ms: 5000,
    max_retries: 2, retry_on: ['5xx'], forward_host_header: true, custom_headers: { 'X-A': '1' }, health_status: 'up', tags: ['t'],
  };
  const entry = toEntry(originFields, origin);
  t.same(Object.keys(entry), ['id', 'name', 'scheme', 'host', 'port', 'path_prefix', 'enabled', 'health_check_url', 'health_check_interval_seconds', 'verify_tls',
    'allow_private_network', 'ssrf_protection', 'timeout_ms', 'connect_timeout_ms', 'max_retries', 'retry_on', 'forward_host_header', 'custom_headers'],
  'the members in the snapshot\'s order, without the endpoint link or what the edge does not see');
  const { health_status: _health, tags: _tags, ...columns } = origin;
  t.same(toRow(originFields, entry, { id: 'e1' }), { ...columns, port: 80 }, 'the row again, linked to its endpoint, an absent port the scheme\'s');

  const endpoint = {
    id: 'e1', name: 'e', hostname: 'e.cdn.example', status: 'disabled', default_origin_id: 'o1', http_version: 'http2', ipv6_enabled: true, response_headers_policy_id: null,
    tls_config: { minimum_protocol_version: 'TLSv1.3', cipher_policy: 'modern', http_to_https_redirect: true, extra: 1 },
    compression: { enabled: false, algorithms: ['br'], min_size_bytes: 0 }, geo_restriction: { enabled: false, policy: 'allowlist', countries: [], action: 'block' },
    custom_error_pages: [], shield_region: null, ip_default_action: 'allow', token_auth_enabled: false,
  };
  const endpointEntry = toEntry(endpointFields, endpoint, { origins: [], signing_keys: [{ id: 'k' }] });
  t.equal(endpointEntry.enabled, false, 'status becomes enabled');
  t.same(endpointEntry.tls_config, { minimum_protocol_version: 'TLSv1.3', cipher_policy: 'modern', http_to_https_redirect: true }, 'only the members the edge reads');
  t.same(endpointEntry.origins, [], 'a computed member');
  const endpointRow = toRow(endpointFields, endpointEntry);
  t.equal(endpointRow.status, 'disabled');
  t.equal(endpointRow.token_auth_enabled, true, 'token authentication from the entry\'s signing keys');
  t.notOk('origins' in endpointRow, 'no column for a computed member');
});
