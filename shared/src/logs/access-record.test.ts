// The line writer (a drain writes each record straight into its chunk as
// bytes) against the line renderer: for every format and field, plain and
// awkward values (escapes, controls, non-ASCII, lone surrogates, nulls,
// fractions, large and negative numbers), the bytes written are exactly the
// UTF-8 of the rendered line, and a line that does not fit is refused whole.
import t from 'tap';
import { LOG_FIELDS, LOG_FORMATS, lineRenderer, lineWriter, syntheticRecord, type AccessRecord } from './access-record.ts';

const base = syntheticRecord('edge-1', Date.UTC(2026, 10, 27, 6, 48, 0, 7));
const records: AccessRecord[] = [
  { ...base, scheme: 'http', host: 'logged.local', path: '/1k', client_ip: '127.0.0.1', bytes_sent: 1024, user_agent: 'wrk' },
  { ...base, path: '/a b/ü', query: 'q="x"&b=\\y', user_agent: 'curl/8 (x)', referer: 'https://ref.example/é€😀', origin_duration_ms: 12.3456 },
  { ...base, path: '/ctl/\u0000\u0001\u001f\u007f', query: 'tab=\t&nl=\n', method: 'PATCH', status: 599, bytes_sent: 2 ** 40 + 3, duration_ms: 1e-7 },
  { ...base, path: '/lone/\ud800/\udfff/x', host: 'xn--bcher-kva.example', denied_by: 'geo', denial_reason: 'country "ZZ" \u2028 \u2029', country: 'ZZ' },
  { ...base, bytes_sent: -1, status: 0, duration_ms: 123456.789, origin_duration_ms: 0, shield: 'via n-1', tls_version: 'TLSv1.3', route_id: 'r', cache_rule_id: 'c', origin_id: 'o' },
  { ...base, bytes_sent: 2147483647, status: 2147483648, duration_ms: Number.NaN, query: '', path: '', request_id: '' },
  { ...base, scheme: 'http', host: 'logged.local', path: '/1k', status: 2147483648, duration_ms: Number.NaN },
  { ...base, scheme: 'https', host: 'logged.local', path: '/1k' },
  { ...base, host: 'bücher.example', path: '/p' },
  { ...base, host: 'q"uote\\.example', path: '/p' },
];
const fieldLists: string[][] = [[], ['timestamp', 'client_ip', 'method', 'url', 'status', 'bytes_sent', 'cache_status', 'edge_node'], ...LOG_FIELDS.map((f) => [f])];

t.test('the writer writes exactly the UTF-8 of the rendered line, for every format and field', async (t) => {
  const buf = Buffer.alloc(4096);
  let checked = 0;
  for (const format of LOG_FORMATS) {
    for (const fields of fieldLists) {
      const render = lineRenderer(format, fields);
      const write = lineWriter(format, fields)!;
      for (const r of records) {
        const expected = Buffer.from(render(r), 'utf8');
        const at = 7;
        const end = write(r, buf, at, buf.length);
        if (!t.same(buf.subarray(at, end), expected, `${format} ${fields.join(',') || 'all'}`)) return;
        checked++;
      }
    }
  }
  t.equal(checked, LOG_FORMATS.length * fieldLists.length * records.length);
});

t.test('a line that does not fit before the end is refused (-1), one that just fits is written', async (t) => {
  const buf = Buffer.alloc(4096);
  for (const format of LOG_FORMATS) {
    const render = lineRenderer(format, []);
    const write = lineWriter(format, [])!;
    for (const r of records) {
      const length = Buffer.byteLength(render(r));
      for (let end = 3; end < 3 + length; end++) {
        if (write(r, buf, 3, end) !== -1) return t.fail(`${format}: a line of ${length} bytes written within ${end - 3}`);
      }
      t.equal(write(r, buf, 3, 3 + length), 3 + length, `${format}: fits exactly`);
    }
  }
});

t.test('no writer when no known field is chosen (the renderer decides)', async (t) => {
  t.equal(lineWriter('ndjson', ['not_a_field']), null);
});
