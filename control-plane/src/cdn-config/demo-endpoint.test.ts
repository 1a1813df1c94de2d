// The edge:demo-endpoint command (npm start's demo endpoint), run as npm start
// runs it (runCommand, here on the test's PostgreSQL): created once and
// published, found by name on later runs (nothing written, no new version),
// moved to another port when the control plane's changes; in both publish
// modes; bad arguments refused before anything is stored.
import t from 'tap';
import { query } from '../../../test/support/auth.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { entities } from '../capabilities.ts';
import { runCommand } from '../db/command-channel.ts';
import { demoEndpointArgs, demoEndpointCommand } from './demo-endpoint-command.ts';

for (const mode of ['manual', 'auto'] as const) {
  t.test(`CDN_PUBLISH_MODE=${mode}`, async (t) => {
    const cp = await startTestControlPlane(t, { env: { CDN_PUBLISH_MODE: mode, CDN_DOMAIN: 'cdn.localhost' } });
    const config = { ...cp.config, DATABASE_URL: cp.database.url };
    const run = async (port: number) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCommand(demoEndpointCommand, demoEndpointArgs.parse({ origin_port: port }), config, { entities, io: { out: (l) => out.push(l), err: (l) => err.push(l) } });
      t.equal(code, 0, err.join('\n'));
      return out.join('\n');
    };
    const versions = async () => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_version`))[0]!.n;

    const first = await run(9300);
    const hostname = /hostname ([a-z][a-z2-7]{15}\.cdn\.localhost) \(written now\)/.exec(first)?.[1];
    t.ok(hostname, first);
    t.match(first, /Active configuration version: 1$/m);
    const [origin] = await query<{ scheme: string; host: string; port: number; allow_private_network: boolean }>(cp,
      `select o.scheme, o.host, o.port, o.allow_private_network from cdn_endpoint e join cdn_origin o on o.id = e.default_origin_id where e.name = 'demo'`);
    t.same(origin, { scheme: 'http', host: '127.0.0.1', port: 9300, allow_private_network: true });
    t.match(await query(cp, `select match, ttl_seconds from cdn_cache_rule`), [{ match: { paths: ['/docs/*'] }, ttl_seconds: 300 }]);
    const active = (await cp.app.edgeConfig.active())!;
    t.equal(active.version, 1);
    t.equal([...active.manifest.keys()].filter((k) => k.startsWith('endpoint/')).length, 1, 'the demo endpoint is published');

    const second = await run(9300);
    t.match(second, `hostname ${hostname}`);
    t.notMatch(second, 'written now', 'found by name: nothing written');
    t.match(second, /Active configuration version: 1$/m);
    t.equal(await versions(), 1, 'no new version');

    const moved = await run(9400);
    t.match(moved, `hostname ${hostname} (written now)`);
    t.match(moved, /Active configuration version: 2$/m, 'the new port is published');
    t.same((await query(cp, `select port from cdn_origin`)), [{ port: 9400 }], 'the origin moved; no second one');
    t.equal((await query(cp, `select id from cdn_endpoint`)).length, 1, 'one endpoint');
  });
}

t.test('bad arguments are refused', async (t) => {
  for (const args of [{}, { origin_port: 0 }, { origin_port: 70000 }, { origin_port: 9300, name: '' }, { origin_port: 9300, extra: 1 }]) {
    t.notOk(demoEndpointArgs.safeParse(args).success, JSON.stringify(args));
  }
});
