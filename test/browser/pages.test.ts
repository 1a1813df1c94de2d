// The control plane's pages and API reference in a real browser (issue 26
// item 3): headless Chromium loads /docs and finds the operations of all
// three APIs, registers through "Try it out" with the prefilled example,
// completes the verify-email and reset-password pages from the e-mailed links
// (read from the outbox's plain-text links.txt), signs in through /login,
// creates an origin through "Try it out" once authorized, and reads the demo
// endpoint's hostname on the index. The pages' Content-Security-Policy is the
// browser's to enforce here: a blocked script or request fails the test.
// Skipped with a message where Chromium is missing, except under CI=true.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import type { Browser, Locator, Page } from 'playwright-core';
import { OUTBOX_LINKS_FILE } from '../../control-plane/src/mail/outbox.ts';
import { createSuperadmin, login, outboxDir, RESET_SUBJECT, settled, VERIFY_SUBJECT } from '../support/auth.ts';
import { ACTION_TIMEOUT_MS, CHROMIUM_INSTALL_HINT, chromiumPath, launchBrowser } from '../support/browser.ts';
import { makeEndpoint } from '../support/cdn.ts';
import { noDnsAnswers } from '../support/cdn.ts';
import { startTestControlPlane, type TestControlPlane } from '../support/control-plane.ts';

// Page functions run in the browser; the project's TypeScript has no DOM library: what they use of it.
declare const document: { getElementById(id: string): { className: string } | null; querySelectorAll(selector: string): Iterable<{ id: string }> };

const executablePath = chromiumPath();
if (!executablePath) {
  if (process.env.CI === 'true') t.fail(CHROMIUM_INSTALL_HINT);
  else t.test('the pages and /docs in a real browser', { skip: CHROMIUM_INSTALL_HINT }, async () => {});
} else {
  await browserTests(executablePath);
}

type OpenApi = { paths: Record<string, Record<string, { tags: string[]; requestBody?: { content: Record<string, { example?: Record<string, unknown> }> } }>> };

async function browserTests(executablePath: string): Promise<void> {
  const cp = await startTestControlPlane(t, { services: noDnsAnswers });
  const browser = await launchBrowser(t, executablePath);
  const doc = (await cp.request('GET', '/openapi.json')).body as OpenApi;
  const registration = doc.paths['/v1/auth/register']!.post!.requestBody!.content['application/json']!.example!;
  const email = registration.email as string;
  const NEW_PASSWORD = 'Reset-in-Chromium-7';
  // One /docs page for the subtests that use it: Swagger UI takes seconds to render 200 operations.
  const docs = await open(t, browser, cp, '/docs');

  t.test('/docs lists the operations of the account, authentication and CDN APIs', async (t) => {
    const page = docs;
    // Swagger UI mounts only the operations near the viewport: the filter box narrows the list to a tag's.
    for (const [tag, operations] of Object.entries({
      Account: ['GET /v1/users/me', 'PATCH /v1/users/me'],
      Subscriptions: ['POST /v1/subscriptions'],
      Authentication: ['POST /v1/auth/register', 'POST /v1/auth/login', 'POST /v1/auth/password/reset'],
      'CDN: endpoints': ['POST /v1/cdn/endpoints', 'GET /v1/cdn/endpoints'],
      'CDN: purge': ['POST /v1/cdn/cache/purge'],
    })) {
      await filterTo(page, tag);
      for (const name of operations) {
        const [method, path] = name.split(' ') as [string, string];
        t.ok(doc.paths[path]![method.toLowerCase()]!.tags.includes(tag), `${name} is tagged ${tag}`);
        await operation(page, method, path).waitFor();
        t.pass(`${tag}: ${name} is listed`);
      }
    }
  });

  t.test('"Try it out" on register sends the prefilled example, and the account is made', async (t) => {
    const page = docs;
    await filterTo(page, 'Authentication');
    const response = await tryItOut(operation(page, 'POST', '/v1/auth/register'));
    t.same(response.prefilled, registration, 'the prefilled body is the declared example');
    t.equal(response.status, '201', response.status === '201' ? 'answered 201 Created' : response.body);
    t.match(JSON.parse(response.body), { data: { email } });
  });

  t.test('the verify-email page, opened from the e-mailed link, confirms the address', async (t) => {
    const link = await emailedLink(cp, email, VERIFY_SUBJECT);
    t.equal(link.pathname, '/verify-email');
    const page = await open(t, browser, cp, link.pathname + link.search);
    await page.fill('#password', registration.password as string);
    await page.click('#submit');
    await statusLine(t, page, 'ok', /Your e-mail address is confirmed/);
    t.ok(await page.locator('#form').isHidden(), 'the form is done');
    const session = await login(cp, email, registration.password as string);
    t.equal((await cp.request('GET', '/v1/users/me', { headers: { authorization: `Bearer ${session.accessToken}` } })).body.data.email_verified, true);
  });

  t.test('forgot-password sends a link whose reset-password page sets a new password', async (t) => {
    const forgot = await open(t, browser, cp, '/forgot-password');
    await forgot.fill('#email', email);
    await forgot.click('#submit');
    await statusLine(t, forgot, 'ok', /a link to choose a new password is on its way/);
    const link = await emailedLink(cp, email, RESET_SUBJECT);
    t.equal(link.pathname, '/reset-password');
    const page = await open(t, browser, cp, link.pathname + link.search);
    await page.fill('#password', NEW_PASSWORD);
    await page.fill('#password-again', 'Something-else-8');
    await page.click('#submit');
    await statusLine(t, page, 'error', /differ/);
    await page.fill('#password-again', NEW_PASSWORD);
    await page.click('#submit');
    await statusLine(t, page, 'ok', /Your password is changed/);
  });

  t.test('/login signs in with the new password and names the account; the old one is refused', async (t) => {
    const page = await open(t, browser, cp, '/login');
    await page.fill('#email', email);
    await page.fill('#password', registration.password as string);
    await page.click('#submit');
    await statusLine(t, page, 'error', /./);
    await page.fill('#password', NEW_PASSWORD);
    await page.click('#submit');
    await statusLine(t, page, 'ok', `Signed in as ${email}`);
  });

  t.test('"Try it out" creates an origin from the prefilled example once authorized with a token', async (t) => {
    const admin = await createSuperadmin(cp);
    const page = docs;
    await page.click('button.btn.authorize');
    await page.locator('.modal-ux input').first().fill(admin.accessToken);
    await page.click('.modal-ux button.authorize');
    await page.click('.modal-ux button.btn-done');
    await filterTo(page, 'CDN: origins');
    const response = await tryItOut(operation(page, 'POST', '/v1/cdn/origins'));
    t.same(response.prefilled, doc.paths['/v1/cdn/origins']!.post!.requestBody!.content['application/json']!.example);
    t.equal(response.status, '201', response.status === '201' ? 'answered 201 Created' : response.body);
    t.match(JSON.parse(response.body), { name: 'Media storage', host: 'media.example.com' });
  });

  t.test('the index names the demo endpoint\'s hostname', async (t) => {
    const { endpoint } = await makeEndpoint(cp, await createSuperadmin(cp), { name: 'demo' });
    const page = await open(t, browser, cp, '/');
    t.match(await page.locator('#demo-endpoint').innerText(), endpoint.hostname);
  });
}

/** A new page at `target` on the control plane, failing the test on a script error or a resource the page's CSP blocks. */
async function open(t: Test, browser: Browser, cp: TestControlPlane, target: string): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1600 } });
  t.teardown(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(ACTION_TIMEOUT_MS);
  page.on('pageerror', (error) => t.fail(`script error on ${target}: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy|Refused to/.test(message.text())) t.fail(`${target}: ${message.text()}`);
  });
  const res = await page.goto(new URL(target, cp.url).href);
  t.equal(res?.status(), 200, `GET ${target}`);
  return page;
}

/** Waits for the page's status line to be of `kind` and to say `text`. */
async function statusLine(t: Test, page: Page, kind: 'ok' | 'error', text: RegExp | string): Promise<void> {
  await page.waitForFunction((k) => document.getElementById('status')?.className === k, kind);
  t.match(await page.locator('#status').innerText(), text);
}

/**
 * Narrows /docs to the tags whose name holds `tag` (Swagger UI's filter box, case-insensitive) and waits until the list
 * shows only those: a click before then could land on an operation the filter is moving away.
 */
async function filterTo(page: Page, tag: string): Promise<void> {
  await page.fill('.operation-filter-input', tag);
  await page.waitForFunction((wanted) => {
    const shown = [...document.querySelectorAll('.opblock-tag')].map((h) => (h as unknown as { dataset: { tag: string } }).dataset.tag);
    return shown.length > 0 && shown.every((name) => name.toLowerCase().includes(wanted.toLowerCase()));
  }, tag);
}

/** The operation's block on /docs (mounted once it is near the viewport). */
function operation(page: Page, method: string, path: string): Locator {
  return page.locator('.opblock')
    .filter({ has: page.locator(`.opblock-summary-path[data-path="${path}"]`) })
    .filter({ has: page.locator('.opblock-summary-method', { hasText: new RegExp(`^${method}$`, 'i') }) });
}

/** Opens the operation, Try it out, reads the prefilled body, Execute, reads the answer. */
async function tryItOut(block: Locator): Promise<{ prefilled: unknown; status: string; body: string }> {
  await block.locator('.opblock-summary-control').click();
  await block.locator('button.try-out__btn').click();
  const prefilled = JSON.parse(await block.locator('textarea.body-param__text').inputValue());
  await block.locator('button.execute').click();
  const answer = block.locator('.live-responses-table tr.response').first();
  await answer.waitFor();
  return {
    prefilled,
    status: (await answer.locator('.response-col_status').innerText()).trim(),
    body: await answer.locator('.response-col_description pre').first().innerText(),
  };
}

/** The newest link with a token to `to` whose message subject matches, as links.txt lists it, re-pointed at the test server (its PUBLIC_URL names port 0). */
async function emailedLink(cp: TestControlPlane, to: string, subject: RegExp): Promise<URL> {
  await settled(cp);
  const blocks = (await readFile(path.join(outboxDir(cp), OUTBOX_LINKS_FILE), 'utf8')).split('\n\n').filter(Boolean);
  const block = blocks.reverse().find((b) => {
    const [header] = b.split('\n');
    return header!.includes(`to ${to} `) && subject.test(/"([^"]*)"/.exec(header!)![1]!);
  });
  if (!block) throw new Error(`no message to ${to} matching ${subject} in ${OUTBOX_LINKS_FILE}`);
  const link = new URL(block.split('\n').slice(1).find((l) => l.includes('token='))!);
  return new URL(link.pathname + link.search, cp.url);
}
