// Interactive API reference at /docs: Swagger UI served from the installed
// swagger-ui-dist package (no CDN), pointed at /openapi.json.
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Context } from 'koa';

const require = createRequire(import.meta.url);
const assetDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const assets: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
  'docs-init.js': 'application/javascript; charset=utf-8',
};
const cache = new Map<string, Buffer>();

const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Streaming platform API reference</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script><script src="/docs/docs-init.js"></script></body></html>`;

// In its own file so the page's Content-Security-Policy needs no inline script. filter: a box that narrows the
// operations to the tags matching what is typed (the three APIs have some 30 tags).
const init = `window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, filter: true, persistAuthorization: false });`;

export async function serveDocs(ctx: Context, asset?: string): Promise<void> {
  ctx.set('content-security-policy', "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'");
  if (!asset) {
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = page;
    return;
  }
  const type = assets[asset];
  if (!type) {
    ctx.status = 404;
    return;
  }
  let body = cache.get(asset);
  if (!body) {
    body = asset === 'docs-init.js' ? Buffer.from(init) : await fs.readFile(path.join(assetDir, asset));
    cache.set(asset, body);
  }
  ctx.set('cache-control', 'public, max-age=3600');
  ctx.type = type;
  ctx.body = body;
}
