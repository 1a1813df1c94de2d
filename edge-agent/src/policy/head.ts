// Small operations on a response head as the exit holds it: a flat
// [name, value, ...] list with lower-case names, where a field may appear on
// several lines. The response policies edit private copies only.

/** Whether the head has the field (name lower-case). */
export function hasHeader(head: readonly string[], name: string): boolean {
  for (let i = 0; i < head.length; i += 2) if (head[i] === name) return true;
  return false;
}

/** The field's value (lines joined with ", "), undefined when absent. */
export function headerValue(head: readonly string[], name: string): string | undefined {
  let out: string | undefined;
  for (let i = 0; i < head.length; i += 2) if (head[i] === name) out = out === undefined ? head[i + 1] : `${out}, ${head[i + 1]}`;
  return out;
}

/** Adds a token to Vary (in place) unless it is already there or Vary is "*". */
export function withVary(head: string[], token: string): void {
  const lower = token.toLowerCase();
  let first = -1;
  for (let i = 0; i < head.length; i += 2) {
    if (head[i] !== 'vary') continue;
    if (first === -1) first = i;
    for (const t of head[i + 1].split(',')) {
      const v = t.trim().toLowerCase();
      if (v === lower || v === '*') return;
    }
  }
  if (first === -1) head.push('vary', token);
  else head[first + 1] = head[first + 1].trim() === '' ? token : `${head[first + 1]}, ${token}`;
}

/** A copy of the head without the named fields. */
export function withoutHeaders(head: readonly string[], names: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < head.length; i += 2) if (!names.has(head[i])) out.push(head[i], head[i + 1]);
  return out;
}
