// Geo restriction: the packaged country database read into range tables (every
// line of both files, the first and last address of sampled ranges), a
// database of our own in the same format, and the allowlist / blocklist rule
// with addresses that have no country.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { IncomingMessage } from 'node:http';
import { endpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { parseClientAddress } from './client-address.ts';
import { compileGeoRestriction, CountryDatabase, packagedCountryDatabase } from './geo.ts';
import type { PolicyRequest } from './index.ts';

const at = (ip: string) => parseClientAddress(ip);

t.test('the packaged database: every range is read, and sampled ranges answer their country at both ends', async (t) => {
  const t0 = performance.now();
  const db = packagedCountryDatabase();
  t.comment(`loaded ${db.ranges} ranges in ${(performance.now() - t0).toFixed(0)} ms`);
  t.equal(packagedCountryDatabase(), db, 'loaded once per process');
  const dir = dirname(createRequire(import.meta.url).resolve('@ip-location-db/geolite2-country/package.json'));
  let lines = 0;
  let wrong = 0;
  for (const family of ['ipv4', 'ipv6']) {
    const rows = readFileSync(join(dir, `geolite2-country-${family}.csv`), 'latin1').split('\n').filter(Boolean);
    lines += rows.length;
    for (let i = 0; i < rows.length; i += 997) {
      const [start, end, cc] = rows[i]!.split(',');
      if (db.country(at(start!)) !== cc || db.country(at(end!)) !== cc) wrong++;
    }
  }
  t.equal(db.ranges, lines, 'one range per line of the two files');
  t.equal(wrong, 0);
  t.equal(db.country(at('8.8.8.8')), 'US');
  t.equal(db.country(at('2001:200::1')), 'JP');
  for (const none of ['127.0.0.1', '10.1.2.3', '192.168.0.1', '::1', 'fe80::1']) t.equal(db.country(at(none)), null, `${none}: no country`);
  t.equal(db.country(null), null);
});

t.test('a database of the same layout from another directory (malformed lines skipped)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'geo-db-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'test-ipv4.csv'), '10.0.0.0,10.0.0.255,FR\nnot,a,line\n10.0.1.0,10.0.1.255,de\n');
  writeFileSync(join(dir, 'test-ipv6.csv'), '2001:db8::,2001:db8::ffff,NL\n::,::,ZZZ\n');
  const db = CountryDatabase.load(dir, 'test');
  t.equal(db.ranges, 3);
  t.equal(db.country(at('10.0.0.9')), 'FR');
  t.equal(db.country(at('10.0.1.9')), 'DE', 'codes upper-cased');
  t.equal(db.country(at('10.0.2.1')), null, 'between ranges');
  t.equal(db.country(at('2001:db8::1234')), 'NL');
  t.equal(db.country(at('2001:db8::1:0')), null);
});

function request(ip: string): PolicyRequest {
  const client = parseClientAddress(ip);
  return { req: {} as IncomingMessage, endpoint: { id: 'ep', snapshot: {} as never }, host: 'cdn.test', path: '/', query: '', rawQuery: '', client, clientIp: client?.text ?? '', secure: false, routeId: '' };
}

const endpoint = (geo: Record<string, unknown>) => endpointSnapshot.parse({ id: 'ep', hostname: 'cdn.test', default_origin_id: 'o1', origins: [{ id: 'o1', host: 'o.test' }], geo_restriction: geo });

t.test('allowlist and blocklist; addresses with no country are never refused; the database is read only when geo is on', async (t) => {
  let loads = 0;
  const database = () => {
    loads++;
    return packagedCountryDatabase();
  };
  t.equal(compileGeoRestriction(endpoint({ enabled: false, countries: ['US'] }), database), null);
  t.equal(loads, 0, 'geo off: the database is not asked for');
  const allow = compileGeoRestriction(endpoint({ enabled: true, policy: 'allowlist', countries: ['us', 'JP'] }), database)!;
  t.equal(allow(request('8.8.8.8')), null);
  t.equal(allow(request('2001:200::1')), null);
  t.same(allow(request('1.0.1.7'))?.denial, { policy: 'geo', reason: 'country_not_allowed' }, 'CN is not on the list');
  t.equal(allow(request('127.0.0.1')), null, 'loopback has no country: not refused');
  const block = compileGeoRestriction(endpoint({ enabled: true, policy: 'blocklist', countries: ['CN'] }), database)!;
  t.same(block(request('::ffff:1.0.1.7'))?.denial, { policy: 'geo', reason: 'country_blocked' });
  t.equal(block(request('1.0.1.7'))?.status, 403);
  t.equal(block(request('8.8.8.8')), null);
  t.equal(block(request('10.0.0.1')), null);
  t.equal(loads, 2);
});
