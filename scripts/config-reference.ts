// Prints the configuration reference (docs/configuration.md) from the two
// processes' configuration schemas: one table per process, each variable with
// its flag, its type or range, its default and the description the schema
// carries. `npm run docs:config` writes the file (`--write`); a house test
// fails when the checked-in file differs from what this prints.
//
// A default that depends on the machine (WORKERS: one per core) or is computed
// at start is printed from the field's `docDefault` metadata, never as this
// machine's value, so the file is the same wherever it is generated.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { controlPlaneConfigSchema } from '../control-plane/src/config/config.ts';
import { agentConfigSchema } from '../edge-agent/src/config.ts';

export const REFERENCE_FILE = path.resolve(import.meta.dirname, '../docs/configuration.md');
export const REFERENCE_COMMAND = 'npm run docs:config';

type Field = z.ZodType;
interface DocMeta { description?: string; docDefault?: string; docType?: string }

export const processes = [
  { title: 'Control plane', command: 'npm run control-plane', source: 'control-plane/src/config/config.ts', schema: controlPlaneConfigSchema },
  { title: 'Edge agent', command: 'npm run edge-agent', source: 'edge-agent/src/config.ts', schema: agentConfigSchema },
] as const;

const MiB = 1024 * 1024;

/** `GRPC_PORT` → `--grpc-port`, as both processes read their flags. */
export function flagOf(name: string): string {
  return `--${name.toLowerCase().replace(/_/g, '-')}`;
}

type Wrapped = Field & { def: { type: string; innerType?: Field; in?: Field } };

/** The field and each wrapper inside it, outermost first: through default and optional, and to a transform's input side. */
function layers(field: Field): Field[] {
  const out: Field[] = [];
  let s: Wrapped | undefined = field as Wrapped;
  while (s !== undefined) {
    out.push(s);
    const def = s.def;
    s = (def.type === 'default' || def.type === 'optional' ? def.innerType : def.type === 'pipe' ? def.in : undefined) as Wrapped | undefined;
  }
  return out;
}

/** The field's metadata, merged from its wrappers inwards (the outer wins): a shared helper may carry a docType. */
function metaOf(field: Field): DocMeta {
  return Object.assign({}, ...layers(field).reverse().map((s) => (s.meta() ?? {}) as DocMeta)) as DocMeta;
}

/** The field without its default/optional wrappers, and the parser's input side of a transform. */
function core(field: Field): Field {
  const all = layers(field);
  return all[all.length - 1];
}

function range(min: number | null | undefined, max: number | null | undefined): string {
  const lo = min !== null && min !== undefined && Number.isFinite(min) ? min : null;
  const hi = max !== null && max !== undefined && Number.isFinite(max) && max < Number.MAX_SAFE_INTEGER ? max : null;
  if (lo !== null && hi !== null) return `${lo}..${hi}`;
  if (lo !== null) return `≥ ${lo}`;
  if (hi !== null) return `≤ ${hi}`;
  return '';
}

function typeOf(name: string, field: Field): string {
  const meta = metaOf(field);
  if (meta.docType) return meta.docType;
  const s = core(field) as Field & { def: { type: string }; minValue?: number | null; maxValue?: number | null; isInt?: boolean;
    options?: readonly string[]; format?: string | null; minLength?: number | null; maxLength?: number | null };
  if (s.def.type === 'number') {
    const r = range(s.minValue, s.maxValue);
    if ((name === 'PORT' || name.endsWith('_PORT')) && r === '0..65535') return 'port 0..65535';
    const unit = name.endsWith('_MS') ? 'milliseconds' : name.endsWith('_BYTES') ? 'bytes' : s.isInt ? 'integer' : 'number';
    return r ? `${unit} ${r}` : unit;
  }
  if (s.def.type === 'enum') return (s.options ?? []).map((o) => `\`${o}\``).join(', ');
  if (s.def.type === 'string') {
    if (name.endsWith('_BYTES')) return 'bytes: `268435456`, `256MiB`, `1GiB`…';
    if (s.format === 'url') return 'URL';
    if (s.format === 'email') return 'e-mail address';
    const r = range(s.minLength && s.minLength > 1 ? s.minLength : null, s.maxLength);
    return r ? `text, ${r} characters` : 'text';
  }
  throw new Error(`${name}: no type to print for a ${s.def.type} schema (give it .meta({ docType }))`);
}

function bytesText(n: number): string {
  if (n >= MiB && n % MiB === 0) return n % (1024 * MiB) === 0 ? `${n / 1024 / MiB} GiB` : `${n / MiB} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}

function defaultOf(name: string, field: Field): string {
  const meta = metaOf(field);
  if (meta.docDefault) return meta.docDefault;
  const s = field as Field & { def: { type: string; defaultValue?: unknown } };
  if (s.def.type !== 'default') return 'unset';
  const value = s.def.defaultValue;
  if (typeof value === 'number' && name.endsWith('_BYTES') && value > 0) return `\`${value}\` (${bytesText(value)})`;
  if (typeof value === 'number' && name.endsWith('_MS') && value >= 1000 && value % 1000 === 0) return `\`${value}\` (${value / 1000} s)`;
  return `\`${String(value)}\``;
}

function descriptionOf(name: string, field: Field): string {
  const text = field.description;
  if (!text) throw new Error(`${name}: the schema gives no description (add .describe() to the field)`);
  // The guides are linked from docs/, where this file lives.
  return text.replace(/docs\/guides\/([a-z0-9-]+\.md)/g, '[guides/$1](guides/$1)');
}

const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

export function configurationReference(): string {
  const out: string[] = [
    '# Configuration reference',
    '',
    `<!-- Generated from the configuration schemas by \`${REFERENCE_COMMAND}\` (scripts/config-reference.ts); do not edit by hand: test/house/docs.test.ts fails when this file is not what the schemas print. -->`,
    '',
    'Every setting of both processes is an environment variable and also a flag (`PORT` ↔ `--port 9000` or `--port=9000`); a flag wins over the variable, and an empty variable counts as unset. '
      + 'A wrong value, a flag naming no variable or a stray argument stops the process with one line naming the variable (exit code 1); secrets are never echoed in it. '
      + '`npm start` takes the control plane\'s flags and a few of the agent\'s (`--http-port`, `--https-port`, `--metrics-port`, `--workers`, the `--cache-*` sizes, `--region`; `npm start -- --help` lists them, and [guides/running-locally.md](guides/running-locally.md) says how its ports follow each other). '
      + 'Byte counts take a unit (`256MiB`, `1GiB`, `64KiB`); times ending in `_MS` are milliseconds.',
  ];
  for (const p of processes) {
    out.push('', `## ${p.title}`, '', `\`${p.command}\`; the schema is \`${p.source}\`.`, '', '| variable | flag | type | default | description |', '|---|---|---|---|---|');
    for (const [name, field] of Object.entries(p.schema.shape) as [string, Field][]) {
      out.push(`| \`${name}\` | \`${flagOf(name)}\` | ${cell(typeOf(name, field))} | ${cell(defaultOf(name, field))} | ${cell(descriptionOf(name, field))} |`);
    }
  }
  return `${out.join('\n')}\n`;
}

if (import.meta.main) {
  const text = configurationReference();
  if (process.argv.includes('--write')) {
    writeFileSync(REFERENCE_FILE, text);
    console.log(`wrote ${path.relative(process.cwd(), REFERENCE_FILE)}`);
  } else {
    process.stdout.write(text);
  }
}
