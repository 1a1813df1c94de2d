// The import rules of .dependency-cruiser.cjs, run as `npm run check:deps`
// runs them, so a capability reached past its door, a framework folder that
// imports a capability, either process importing the other, shared/ importing
// either, the edge's cache reached past its door or importing the request path
// above it, or an import cycle fails the suite. Each rule is first shown to
// catch its violation on a small tree of its own.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CONFIG = path.join(ROOT, '.dependency-cruiser.cjs');
const CRUISER = path.join(ROOT, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');

function cruise(cwd: string, args: string[]) {
  const run = spawnSync(process.execPath, [CRUISER, ...args], { cwd, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

t.test('each rule catches its violation', async (t) => {
  const dir = t.testdir({
    'tsconfig.json': JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', allowImportingTsExtensions: true, noEmit: true } }),
  });
  const files: Record<string, string> = {
    'control-plane/src/cdn/index.ts': "export { originFields } from './origin-record.ts';\n",
    'control-plane/src/cdn/origin-record.ts': 'export const originFields = 1;\n',
    'control-plane/src/cdn/contracts.ts': 'export type Seam = 1;\n',
    // through the doors: allowed
    'control-plane/src/cdn-config/through-door.ts': "import { originFields } from '../cdn/index.ts';\nimport type { Seam } from '../cdn/contracts.ts';\nexport const a: Seam = originFields;\n",
    // past the door
    'control-plane/src/cdn-config/past-door.ts': "import { originFields } from '../cdn/origin-record.ts';\nexport const b = originFields;\n",
    'control-plane/src/http/reaches-up.ts': "import { originFields } from '../cdn/index.ts';\nexport const c = originFields;\n",
    'control-plane/src/jobs/reaches-root.ts': "import { d } from '../server.ts';\nexport const e = d;\n",
    'control-plane/src/server.ts': 'export const d = 1;\n',
    'edge-agent/src/reaches-control-plane.ts': "import { d } from '../../control-plane/src/server.ts';\nexport const f = d;\n",
    'control-plane/src/cdn/reaches-agent.ts': "import { g } from '../../../edge-agent/src/agent.ts';\nexport const h = g;\n",
    'edge-agent/src/agent.ts': 'export const g = 1;\n',
    'shared/src/reaches-agent.ts': "import { g } from '../../edge-agent/src/agent.ts';\nexport const i = g;\n",
    'edge-agent/src/cache/index.ts': "export { l } from './cache-store.ts';\n",
    'edge-agent/src/cache/cache-store.ts': 'export const l = 1;\n',
    'edge-agent/src/proxy/through-cache-door.ts': "import { l } from '../cache/index.ts';\nexport const m = l;\n",
    'edge-agent/src/proxy/past-cache-door.ts': "import { l } from '../cache/cache-store.ts';\nexport const n = l;\n",
    'edge-agent/src/cache/reaches-proxy.ts': "import { m } from '../proxy/through-cache-door.ts';\nexport const o = m;\n",
    'shared/src/cycle-a.ts': "import { k } from './cycle-b.ts';\nexport const j = () => k;\n",
    'shared/src/cycle-b.ts': "import { j } from './cycle-a.ts';\nexport const k = () => j;\n",
  };
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), text);
  }
  const run = cruise(dir, ['--config', CONFIG, '--output-type', 'json', 'control-plane', 'edge-agent', 'shared']);
  const result = JSON.parse(run.output) as { summary: { violations: { rule: { name: string }; from: string; to: string }[] } };
  t.same(result.summary.violations.map((v) => `${v.rule.name}: ${v.from} → ${v.to}`).sort(), [
    'capability-door: control-plane/src/cdn-config/past-door.ts → control-plane/src/cdn/origin-record.ts',
    'control-plane-not-edge-agent: control-plane/src/cdn/reaches-agent.ts → edge-agent/src/agent.ts',
    'edge-agent-not-control-plane: edge-agent/src/reaches-control-plane.ts → control-plane/src/server.ts',
    'edge-cache-below-request-path: edge-agent/src/cache/reaches-proxy.ts → edge-agent/src/proxy/through-cache-door.ts',
    'edge-cache-door: edge-agent/src/proxy/past-cache-door.ts → edge-agent/src/cache/cache-store.ts',
    'framework-not-capability: control-plane/src/http/reaches-up.ts → control-plane/src/cdn/index.ts',
    'framework-not-composition-root: control-plane/src/jobs/reaches-root.ts → control-plane/src/server.ts',
    'no-circular: shared/src/cycle-a.ts → shared/src/cycle-b.ts',
    'shared-imports-neither: shared/src/reaches-agent.ts → edge-agent/src/agent.ts',
  ]);
  const failing = cruise(dir, ['--config', CONFIG, '--output-type', 'err', 'control-plane', 'edge-agent', 'shared']);
  t.equal(failing.status, 9, 'the exit status counts the violations, so the check fails on any');
});

t.test('the tree keeps the import rules (npm run check:deps)', async (t) => {
  const script = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['check:deps'];
  const [command, ...args] = script.split(' ');
  t.equal(command, 'depcruise', 'the script runs the cruiser');
  const run = cruise(ROOT, args);
  t.equal(run.status, 0, `no violations${run.status === 0 ? '' : `:\n${run.output}`}`);
});
