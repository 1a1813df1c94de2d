// Development/test outbox: each message as an .eml file plus a JSON sidecar
// that tests and developers can read without parsing MIME, and its links
// appended to links.txt, a plain-text file a developer reads with tail.
import { randomBytes } from 'node:crypto';
import { appendFile, mkdir, readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export type OutboxEntry = {
  id: string;
  message_id: string;
  to: string;
  subject: string;
  text: string;
  /** Every http(s) URL in the text body, in order. */
  links: string[];
  created_at: string;
  /** File name of the raw message next to this sidecar. */
  eml: string;
};

export type MessageFilter = { to: string; subject?: string | RegExp };

/** http(s) URLs in a text body (trailing punctuation excluded). */
export function extractLinks(text: string): string[] {
  return [...text.matchAll(/https?:\/\/[^\s<>"')\]]+/g)].map((m) => m[0].replace(/[.,;:!?]+$/, ''));
}

let sequence = 0;

/** Names sort in write order: milliseconds, then a per-process sequence, then randomness across processes. */
function newId(now: Date): string {
  sequence = (sequence + 1) % 1_000_000;
  return `${now.getTime().toString().padStart(14, '0')}-${sequence.toString().padStart(6, '0')}-${randomBytes(3).toString('hex')}`;
}

// Write to a temp name, then rename: a reader never sees half a file.
async function writeAtomic(file: string, data: string | Buffer): Promise<void> {
  const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, data, { mode: 0o600 });
  await rename(tmp, file);
}

export async function writeOutboxMessage(
  dir: string,
  raw: Buffer,
  meta: { messageId: string; to: string; subject: string; text: string },
  now = new Date(),
): Promise<OutboxEntry> {
  // Messages carry live tokens: keep the folder private to the service user.
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const id = newId(now);
  const entry: OutboxEntry = {
    id,
    message_id: meta.messageId,
    to: meta.to,
    subject: meta.subject,
    text: meta.text,
    links: extractLinks(meta.text),
    created_at: now.toISOString(),
    eml: `${id}.eml`,
  };
  await writeAtomic(path.join(dir, entry.eml), raw);
  // One append per message (O_APPEND: whole blocks, also from several processes sharing the folder).
  const linksFile = path.join(dir, OUTBOX_LINKS_FILE);
  const first = await stat(linksFile).then((s) => s.size === 0, () => true);
  await appendFile(linksFile, linksBlock(entry, first), { mode: 0o600 });
  // Sidecar last: once it exists, the .eml and the links are written too.
  await writeAtomic(path.join(dir, `${id}.json`), JSON.stringify(entry, null, 2) + '\n');
  return entry;
}

/** The plain-text copy of every message's links, oldest first, next to the messages. */
export const OUTBOX_LINKS_FILE = 'links.txt';

/**
 * A message's block in links.txt: when, to whom and the subject on one line, then each link on a line of its own.
 * A blank line separates it from the block before (none before the first), so the file ends on the newest link
 * and `tail -1 links.txt` prints it.
 */
export function linksBlock(entry: Pick<OutboxEntry, 'created_at' | 'to' | 'subject' | 'links' | 'eml'>, first: boolean): string {
  const header = `${entry.created_at}  to ${entry.to}  "${entry.subject.replace(/[\r\n]+/g, ' ')}"  (${entry.eml})`;
  return `${first ? '' : '\n'}${[header, ...(entry.links.length ? entry.links : ['(no links)'])].join('\n')}\n`;
}

/** All messages in the outbox, oldest first. An absent folder is an empty outbox. */
export async function readOutbox(dir: string): Promise<OutboxEntry[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const entries = await Promise.all(
    names
      .filter((n) => n.endsWith('.json'))
      .map(async (n) => JSON.parse(await readFile(path.join(dir, n), 'utf8')) as OutboxEntry),
  );
  return entries.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
}

function matches(entry: OutboxEntry, filter: MessageFilter): boolean {
  if (entry.to.toLowerCase() !== filter.to.toLowerCase()) return false;
  if (filter.subject === undefined) return true;
  return typeof filter.subject === 'string' ? entry.subject === filter.subject : filter.subject.test(entry.subject);
}

/** The newest message to `to` (case-insensitive), optionally with a subject (exact or RegExp). */
export async function findLatestMessage(dir: string, filter: MessageFilter): Promise<OutboxEntry | undefined> {
  const entries = await readOutbox(dir);
  return entries.reverse().find((e) => matches(e, filter));
}

/** Poll until a matching message written at or after `since` appears (for mail sent in the background). */
export async function waitForMessage(
  dir: string,
  filter: MessageFilter & { since?: Date },
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<OutboxEntry> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  const since = filter.since?.toISOString() ?? '';
  for (;;) {
    const entries = await readOutbox(dir);
    const found = entries.reverse().find((e) => e.created_at >= since && matches(e, filter));
    if (found) return found;
    if (Date.now() >= deadline) throw new Error(`no message to ${filter.to} in ${dir}`);
    await sleep(opts.intervalMs ?? 25);
  }
}

/** The raw RFC 5322 message of an entry. */
export async function readRawMessage(dir: string, entry: OutboxEntry): Promise<string> {
  return readFile(path.join(dir, entry.eml), 'utf8');
}
