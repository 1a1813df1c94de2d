#!/usr/bin/env node
// Launches the edge agent with the project's Node 24 (the system node may be older
// and cannot strip TypeScript types). Signals are forwarded; the exit code is kept.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const main = join(root, 'edge-agent', 'src', 'main.ts');
const major = Number(process.versions.node.split('.')[0]);
const bundled = join(root, 'node_modules', 'node', 'bin', 'node');
const node = major >= 24 ? process.execPath : existsSync(bundled) ? bundled : null;
if (!node) {
  process.stderr.write('edge-agent: Node 24 is required (run npm install in the project to get it)\n');
  process.exit(1);
}
const child = spawn(node, [main, ...process.argv.slice(2)], { stdio: 'inherit' });
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
