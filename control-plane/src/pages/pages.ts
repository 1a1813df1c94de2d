// The control plane's own small HTML pages: the index at `/`, and the pages
// the links in e-mails open when no front end is configured (APP_URL unset):
// verify e-mail, reset password, accept an invitation, plus the sign-in and
// forgot-password pages the registration notice links to. Each page completes
// its action through the public API from assets/pages.js; the pages carry their
// own Content-Security-Policy (scripts and styles from 'self' only, no inline
// code), like /docs does.
import fs from 'node:fs';
import type { Context } from 'koa';
import { Endpoint } from '../cdn/index.ts';
import { ApiError } from '../http/errors.ts';
import type { RequestState } from '../http/request-state.ts';
import type { Router } from '../http/router.ts';
import { escapeHtml } from '../mail/templates.ts';

/** The name `npm start` gives the demo endpoint (scripts/dev.ts, the edge:demo-endpoint command), which finds the oldest endpoint of that name. */
export const DEMO_ENDPOINT_NAME = 'demo';

export const PAGES_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const assets: Record<string, { type: string; body: Buffer }> = {
  'pages.js': { type: 'application/javascript; charset=utf-8', body: fs.readFileSync(new URL('./assets/pages.js', import.meta.url)) },
  'pages.css': { type: 'text/css; charset=utf-8', body: fs.readFileSync(new URL('./assets/pages.css', import.meta.url)) },
  'favicon.svg': { type: 'image/svg+xml', body: fs.readFileSync(new URL('./assets/favicon.svg', import.meta.url)) },
};

export interface PagesInfo {
  version: string;
  /** Where the API is reached (PUBLIC_URL). */
  publicUrl: string;
}

function layout(title: string, page: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · Streaming Platform</title>
<link rel="icon" href="/pages/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/pages/pages.css"></head>
<body data-page="${page}"><main>
<h1>${escapeHtml(title)}</h1>
${body}
</main>
<script src="/pages/pages.js"></script></body></html>`;
}

const status = '<p id="status" role="status" aria-live="polite"></p>';
const newPasswordFields = `<label>New password <input id="password" name="password" type="password" autocomplete="new-password" required minlength="10" maxlength="128"></label>
<label>Repeat it <input id="password-again" name="password-again" type="password" autocomplete="new-password" required minlength="10" maxlength="128"></label>
<p class="hint">10 to 128 characters, with an uppercase and a lowercase letter, a digit and a special character.</p>`;

const actionPages: Record<string, { title: string; body: string }> = {
  'verify-email': {
    title: 'Confirm your e-mail address',
    body: `<form id="form"><p>Confirm that this address is yours to finish setting up the account: enter the password you chose when you registered.</p>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password" maxlength="1024"></label>
<p class="hint">Did you not register, or forgot the password? Leave it empty and choose a new one instead. Either way, confirming signs out every device signed in to the account.</p>
<label>New password <input id="new-password" name="new-password" type="password" autocomplete="new-password" minlength="10" maxlength="128"></label>
<label>Repeat it <input id="new-password-again" name="new-password-again" type="password" autocomplete="new-password" minlength="10" maxlength="128"></label>
<button id="submit" type="submit">Confirm my address</button></form>
${status}`,
  },
  'reset-password': {
    title: 'Choose a new password',
    body: `<form id="form"><p>The link works once, for 15 minutes. Changing the password signs you out on every device.</p>
${newPasswordFields}
<button id="submit" type="submit">Set the new password</button></form>
${status}
<p class="links"><a href="/forgot-password">Ask for a new link</a></p>`,
  },
  'accept-invitation': {
    title: 'Accept your invitation',
    body: `<form id="form"><p>Choose the password of your new account to activate it.</p>
${newPasswordFields}
<button id="submit" type="submit">Activate my account</button></form>
${status}`,
  },
  'forgot-password': {
    title: 'Forgot your password?',
    body: `<form id="form"><p>Enter the address of your account: we send it a link to choose a new password.</p>
<label>E-mail address <input id="email" name="email" type="email" autocomplete="email" required maxlength="254"></label>
<button id="submit" type="submit">Send the link</button></form>
${status}`,
  },
  login: {
    title: 'Sign in',
    body: `<form id="form">
<label>E-mail address <input id="email" name="email" type="email" autocomplete="username" required maxlength="254"></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password" required maxlength="1024"></label>
<label id="code-field" hidden>Authenticator or recovery code <input id="code" name="code" autocomplete="one-time-code" maxlength="32"></label>
<button id="submit" type="submit">Sign in</button></form>
${status}
<p class="links"><a href="/forgot-password">Forgot your password?</a></p>`,
  },
};

/**
 * The demo endpoint's CDN hostname, as the edge:demo-endpoint command finds it; undefined when there is none, or when
 * the database cannot say (the index still answers, without it: readiness is where the database's state is reported).
 */
async function demoHostname(ctx: Context): Promise<string | undefined> {
  const state = ctx.state as RequestState;
  try {
    const [endpoint] = await state.em.find(Endpoint, { name: DEMO_ENDPOINT_NAME }, { orderBy: { created_at: 'asc', id: 'asc' }, limit: 1, fields: ['hostname'] });
    return endpoint?.hostname;
  } catch (error) {
    state.log.warn({ err: (error as Error).message }, 'the index could not read the demo endpoint');
    return undefined;
  }
}

function demoParagraph(hostname: string | undefined): string {
  if (!hostname) {
    return `<p><code>npm start</code> runs one beside this control plane, with a demo endpoint named <code>${DEMO_ENDPOINT_NAME}</code> caching this page's API reference.</p>`;
  }
  const name = escapeHtml(hostname);
  return `<p id="demo-endpoint">The demo endpoint <code>${DEMO_ENDPOINT_NAME}</code> is served at <code>${name}</code> by the edge agents, on their HTTP port `
    + `(8090 unless set: <code>curl -sI -H 'Host: ${name}' http://localhost:8090/docs/swagger-ui.css</code>, twice: MISS, then HIT).</p>`;
}

function indexPage(info: PagesInfo, demo: string | undefined): string {
  const base = escapeHtml(info.publicUrl);
  return layout('Streaming platform control plane', 'index', `<p>Version ${escapeHtml(info.version)}. This server runs the account, authentication and CDN management APIs under <code>/v1</code>.</p>
<h2>API</h2>
<ul>
<li><a href="/docs">API reference</a> (interactive) and the <a href="/openapi.json">OpenAPI 3.1 document</a></li>
<li>Base URL: <code>${base}/v1</code>; tokens are verified with the keys at <a href="/.well-known/jwks.json"><code>/.well-known/jwks.json</code></a></li>
<li>Register: <code>POST /v1/auth/register</code>; sign in: <code>POST /v1/auth/login</code> (or <a href="/login">this page</a>)</li>
</ul>
<h2>Health</h2>
<ul>
<li><a href="/v1/cdn/health/ready">Readiness</a> (database, store and edge configuration, each with what it runs on)</li>
<li><a href="/healthz">Liveness</a> and <a href="/metrics">Prometheus metrics</a></li>
</ul>
<h2>Edge agent</h2>
<p>Edge agents serve the CDN traffic: one per node or region. Start one with <code>npm run edge-agent -- --config-file edge-agent/examples/snapshot.json</code> (or <code>npx edge-agent</code>). Each agent exposes <code>/metrics</code> and <code>/healthz</code> on its metrics port.</p>
${demoParagraph(demo)}`);
}

/** Answers the page's HTML or asset with the pages' CSP. */
function send(ctx: Context, type: string, body: string | Buffer, cache = 'no-store'): void {
  ctx.set('content-security-policy', PAGES_CSP);
  ctx.set('cache-control', cache);
  ctx.type = type;
  ctx.body = body;
}

export function mountPages(router: Router, info: PagesInfo): void {
  router.on('get', '/', async (ctx) => {
    // API clients (curl's */*) get the same links as JSON; browsers get the page.
    const demo = await demoHostname(ctx);
    if (ctx.accepts('json', 'html') === 'json') {
      ctx.body = {
        name: 'Streaming platform control plane',
        version: info.version,
        links: { api: `${info.publicUrl}/v1`, docs: '/docs', openapi: '/openapi.json', readiness: '/v1/cdn/health/ready', liveness: '/healthz', metrics: '/metrics', jwks: '/.well-known/jwks.json' },
        demo_endpoint_hostname: demo ?? null,
      };
      return;
    }
    send(ctx, 'text/html; charset=utf-8', indexPage(info, demo));
  });
  for (const [name, page] of Object.entries(actionPages)) {
    // Tokens ride in the query string: the frame's `Referrer-Policy: no-referrer` keeps them from leaking, and the access log records paths only.
    router.on('get', `/${name}`, async (ctx) => send(ctx, 'text/html; charset=utf-8', layout(page.title, name, page.body)));
  }
  // Browsers ask for /favicon.ico on every page without a <link rel="icon"> (/docs among them): the same icon.
  router.on('get', '/favicon.ico', async (ctx) => send(ctx, assets['favicon.svg']!.type, assets['favicon.svg']!.body, 'public, max-age=86400'));
  router.on('get', '/pages/:asset', async (ctx, params) => {
    const asset = Object.hasOwn(assets, params.asset!) ? assets[params.asset!] : undefined;
    if (!asset) throw new ApiError('NOT_FOUND', 'No such page asset');
    send(ctx, asset.type, asset.body, 'public, max-age=3600');
  });
}
