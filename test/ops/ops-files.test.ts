// The deployment material in ops/ checked as operators would use it (issue 26
// items 1 and 2): Prometheus's configuration and alert rules through promtool
// (check config, check rules, the rules' unit tests, every alert tested), the
// dashboards' shape and data source. Skips promtool's checks without it; fails
// them under CI=true, where .ci/run installs it.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { PROMTOOL_INSTALL_HINT, promtool, promtoolInstalled } from '../support/promtool.ts';
import { alertQueries, DASHBOARDS, dashboardQueries, metricNames, OPS } from './queries.ts';

const yamlFile = (file: string) => parse(readFileSync(path.join(OPS, file), 'utf8'));

t.test('promtool accepts the configuration, the rules and their unit tests', async (t) => {
  if (!promtoolInstalled()) {
    if (process.env.CI === 'true') t.fail(PROMTOOL_INSTALL_HINT);
    else t.skip(PROMTOOL_INSTALL_HINT);
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
