// The PromQL expressions ops/ holds (alert rules, the Grafana dashboards'
// targets) and the metric names they read, for test/ops/*.test.ts.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

export const OPS = fileURLToPath(new URL('../../ops/', import.meta.url));
export const DASHBOARDS = path.join(OPS, 'grafana', 'dashboards');

export interface Query { where: string; expr: string }

/** Every alert and recording rule's expression in ops/alerts.yml. */
export function alertQueries(): Query[] {
  const rules = parse(readFileSync(path.join(OPS, 'alerts.yml'), 'utf8')) as { groups: { name: string; rules: { alert?: string; record?: string; expr: string }[] }[] };
  return rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `alerts.yml ${r.alert ?? r.record}`, expr: String(r.expr) })));
}

interface Panel { title?: string; targets?: { expr?: string }[]; panels?: Panel[] }

/** Every target expression of every panel (rows' panels included) of every dashboard in ops/grafana/dashboards. */
export function dashboardQueries(): Query[] {
  const out: Query[] = [];
  for (const file of readdirSync(DASHBOARDS).filter((f) => f.endsWith('.json')).sort()) {
    const dashboard = JSON.parse(readFileSync(path.join(DASHBOARDS, file), 'utf8')) as { panels: Panel[]; templating?: { list: { name: string; query?: unknown }[] } };
    const walk = (panels: Panel[]) => {
      for (const panel of panels) {
        for (const target of panel.targets ?? []) if (target.expr) out.push({ where: `${file} "${panel.title}"`, expr: target.expr });
        walk(panel.panels ?? []);
      }
    };
    walk(dashboard.panels);
    for (const variable of dashboard.templating?.list ?? []) {
      const q = typeof variable.query === 'string' ? variable.query : (variable.query as { query?: string } | undefined)?.query;
      // label_values(metric, label) reads the metric too.
      const m = q && /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(q);
      if (m) out.push({ where: `${file} variable $${variable.name}`, expr: m[1]! });
    }
  }
  return out;
}

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool', 'and', 'or', 'unless', 'inf', 'nan', 'atan2']);

/** The metric names a PromQL expression selects (functions, keywords, labels, durations and Grafana variables left out). */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, ' ') // strings
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ') // Grafana variables
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // grouping labels
    .replace(/\boffset\s+-?\w+/g, ' ');
  const names = new Set<string>();
  for (const m of stripped.matchAll(/(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:]|\s*\()/g)) {
    const name = m[1]!;
    if (!KEYWORDS.has(name.toLowerCase())) names.add(name);
  }
  return [...names];
}
