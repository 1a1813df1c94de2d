// A log receiver for the log-drain benchmark: answers every POST 200 after
// reading it, and counts the ndjson records (lines) and bytes it got; GET
// /count answers {records, bytes, batches}.
import http from 'node:http';

const port = Number(process.argv[2]);
let records = 0;
let bytes = 0;
let batches = 0;
http.createServer((req, res) => {
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ records, bytes, batches }));
    return;
  }
  let lines = 0;
  req.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
  }).on('end', () => {
    records += lines;
    batches++;
    res.writeHead(200);
    res.end();
  });
}).listen(port, '127.0.0.1');
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
