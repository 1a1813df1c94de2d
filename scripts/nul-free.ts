// The test command's output stays text: a NUL byte some test printed (a test
// name holding one, a child's log line) is written as the six characters
// \u0000, which a CI log viewer shows instead of calling the log binary.
// Byte-wise on purpose: UTF-8 never uses byte 0 inside a character, so a
// chunk cut anywhere is rewritten correctly.
const NUL_TEXT = Buffer.from('\\u0000');

export function withoutNul(chunk: Buffer): Buffer {
  if (!chunk.includes(0)) return chunk;
  const parts: Buffer[] = [];
  let from = 0;
  for (let at = chunk.indexOf(0); at !== -1; at = chunk.indexOf(0, from)) {
    parts.push(chunk.subarray(from, at), NUL_TEXT);
    from = at + 1;
  }
  parts.push(chunk.subarray(from));
  return Buffer.concat(parts);
}
