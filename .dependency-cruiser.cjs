// The import rules of the house, checked by `npm run check:deps` and by
// test/house/dependency-rules.test.ts (so `npm test` fails on a violation).
// The layers and the doors are described in docs/decisions.md ("The house").

/** The capabilities of control-plane/src: one folder each, met only at their doors. */
const CAPABILITIES = '(accounts|admin|auth|billing|cdn|cdn-admin|cdn-analytics|cdn-config|edge-channel|health|notifications|pages)';
/** The framework folders: generic, below every capability. */
const FRAMEWORK = '(audit|config|core|crypto|db|http|jobs|mail|permissions|store|tokens)';
/** A capability's doors: its module (index.ts) and, where it declares one, its seam of types (contracts.ts). */
const DOORS = '(index|contracts)\\.ts$';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'capability-door',
      severity: 'error',
      comment: "A capability imports another capability only through that folder's index.ts or contracts.ts.",
      from: { path: `^control-plane/src/${CAPABILITIES}/` },
      to: {
        path: `^control-plane/src/${CAPABILITIES}/`,
        pathNot: ['^control-plane/src/$1/', `^control-plane/src/${CAPABILITIES}/${DOORS}`],
      },
    },
    {
      name: 'framework-not-capability',
      severity: 'error',
      comment: 'Framework folders are generic: they never import a capability (their tests neither).',
      from: { path: `^control-plane/src/${FRAMEWORK}/` },
      to: { path: `^control-plane/src/${CAPABILITIES}/` },
    },
    {
      name: 'framework-not-composition-root',
      severity: 'error',
      comment: 'Framework code never imports the composition root; its tests may start the composed control plane, as test/support does.',
      from: { path: `^control-plane/src/${FRAMEWORK}/`, pathNot: '\\.test\\.ts$' },
      to: { path: ['^control-plane/src/(capabilities|server|main)\\.ts$', '^control-plane/src/cli/'] },
    },
    {
      name: 'edge-agent-not-control-plane',
      severity: 'error',
      comment: 'The edge agent is its own process: it shares code with the control plane only through shared/.',
      from: { path: '^edge-agent/' },
      to: { path: '^control-plane/' },
    },
    {
      name: 'control-plane-not-edge-agent',
      severity: 'error',
      comment: "The control plane imports nothing of the edge agent (whole-system tests in test/ start both).",
      from: { path: '^control-plane/' },
      to: { path: '^edge-agent/' },
    },
    {
      name: 'shared-imports-neither',
      severity: 'error',
      comment: 'shared/ is below both processes: it imports neither.',
      from: { path: '^shared/' },
      to: { path: ['^control-plane/', '^edge-agent/'] },
    },
    {
      name: 'edge-cache-door',
      severity: 'error',
      comment: "The edge agent's cache is met at its door: from outside edge-agent/src/cache/, only its index.ts is imported.",
      from: { pathNot: '^edge-agent/src/cache/' },
      to: { path: '^edge-agent/src/cache/', pathNot: '^edge-agent/src/cache/index\\.ts$' },
    },
    {
      name: 'edge-cache-below-request-path',
      severity: 'error',
      comment: 'The cache is below the request path and the process: it imports nothing of the proxy, the control channel, the workers, TLS, policies, logs or the agent.',
      from: { path: '^edge-agent/src/cache/' },
      to: { path: ['^edge-agent/src/(proxy|control|workers|tls|policy|logs)/', '^edge-agent/src/(agent|main|agent-options|config)\\.ts$'] },
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Imports run one way; a cycle means two modules are one.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      comment: 'An import the cruiser cannot resolve would escape every rule above.',
      from: {},
      // node:sqlite is a builtin this resolver does not list yet.
      to: { couldNotResolve: true, pathNot: '^node:' },
    },
  ],
  options: {
    // Type-only imports are dependencies too: a door is for types as much as for values.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^node_modules/', '(^|/)\\.data/', '^shared/gen/'] },
    moduleSystems: ['es6'],
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.js', '.mjs', '.cjs', '.json'],
    },
    skipAnalysisNotInRules: true,
  },
};
