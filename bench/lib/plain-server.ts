// Baseline: a plain node:http server answering the same bytes from memory.
import { createServer } from 'node:http';

const port = Number(process.argv[2]);
const bodies = new Map<string, Buffer>([['/1k', Buffer.alloc(1024, 'a')], ['/100k', Buffer.alloc(100 * 1024, 'b')]]);
createServer((req, res) => {
  const body = bodies.get(req.url ?? '');
  if (!body) {
    res.writeHead(404);
    res.end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length, 'cache-control': 'max-age=3600' });
  res.end(body);
}).listen(port, '127.0.0.1');
