// The documentation keeps its shape: the configuration reference is what the
// two processes' configuration schemas print (and names every variable they
// read), the README stays a short front page, and every link from one page to
// a local file leads to a file that exists.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { configurationReference, flagOf, processes, REFERENCE_COMMAND, REFERENCE_FILE } from '../../scripts/config-reference.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const README_LIMIT_BYTES = 10_240;

t.test('docs/configuration.md is what the configuration schemas print', async (t) => {
  const checkedIn = existsSync(REFERENCE_FILE) ? readFileSync(REFERENCE_FILE, 'utf8') : '';
  t.ok(checkedIn === configurationReference(), `docs/configuration.md is current (run \`${REFERENCE_COMMAND}\` to regenerate it)`);
});

t.test('the configuration reference names every variable of both processes, with its flag', async (t) => {
  const text = readFileSync(REFERENCE_FILE, 'utf8');
  for (const p of processes) {
    const start = text.indexOf(`## ${p.title}\n`);
    t.not(start, -1, `a section for the ${p.title.toLowerCase()}`);
    const next = text.indexOf('\n## ', start + 1);
    const section = text.slice(start, next === -1 ? undefined : next);
    for (const name of Object.keys(p.schema.shape)) {
      t.ok(section.includes(`| \`${name}\` | \`${flagOf(name)}\` |`), `${p.title}: ${name} (run \`${REFERENCE_COMMAND}\`)`);
    }
  }
});

t.test('a default that depends on the machine is printed in words, not as this machine\'s number', async (t) => {
  const text = readFileSync(REFERENCE_FILE, 'utf8');
  t.match(text, /\| `WORKERS` \| `--workers` \| [^|]+ \| one per core \|/);
});

t.test(`README.md stays a front page of at most ${README_LIMIT_BYTES} bytes`, async (t) => {
  const size = readFileSync(path.join(ROOT, 'README.md')).length;
  t.ok(size <= README_LIMIT_BYTES, `README.md is ${size} bytes (move detail into docs/guides/ or ops/README.md)`);
  const text = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  t.ok(text.includes('npm ci && npm start'), 'the command that runs the product');
  t.ok(text.includes('npm ci && npm test'), 'the command that runs the tests');
});

/** The pages whose local links must resolve. */
function pages(): string[] {
  const guides = path.join(ROOT, 'docs/guides');
  return [
    'README.md', 'ARCHITECTURE.md', 'ops/README.md', 'docs/configuration.md',
    ...(existsSync(guides) ? readdirSync(guides).filter((f) => f.endsWith('.md')).map((f) => `docs/guides/${f}`) : []),
  ];
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/`/g, '').replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
}

function anchorsIn(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchorOf(m[1])));
}

/** The targets of a page's markdown links, outside code blocks and code spans. */
function localLinks(text: string): string[] {
  const prose = text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]).filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

t.test('every link to a local file (and heading) in the documentation resolves', async (t) => {
  for (const page of pages()) {
    const file = path.join(ROOT, page);
    t.ok(existsSync(file), `${page} exists`);
    if (!existsSync(file)) continue;
    for (const target of localLinks(readFileSync(file, 'utf8'))) {
      const [relative, anchor] = target.split('#');
      const resolved = relative === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(relative));
      const exists = existsSync(resolved);
      t.ok(exists, `${page}: ${target} → ${path.relative(ROOT, resolved)}`);
      if (exists && anchor && resolved.endsWith('.md')) {
        t.ok(anchorsIn(resolved).has(anchor), `${page}: ${target} names a heading of ${path.relative(ROOT, resolved)}`);
      }
    }
  }
});
