import t from 'tap';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { openPage } from '../../../test/support/pages.ts';
import { bearer, createAdmin, login, OTHER_PASSWORD, PASSWORD, query, register, RESET_SUBJECT, uniqueEmail, VERIFY_SUBJECT, outboxDir } from '../../../test/support/auth.ts';
import { waitForMessage } from '../mail/outbox.ts';
import { makeEndpoint } from '../../../test/support/cdn.ts';
import { DEMO_ENDPOINT_NAME, PAGES_CSP } from './pages.ts';

/** The e-mailed link, re-pointed at the test server (its PUBLIC_URL names port 0). */
async function emailedLink(cp: TestControlPlane, to: string, subject: RegExp): Promise<URL> {
  const message = await waitForMessage(outboxDir(cp), { to, subject });
  const link = new URL(message.links.find((l) => new URL(l).searchParams.has('token'))!);
  return new URL(link.pathname + link.search, cp.url);
}

t.test('GET / answers a small index (HTML for browsers, JSON otherwise) whose links all work', async (t) => {
  const cp = await startTestControlPlane(t);
  const html = await fetch(cp.url + '/', { headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
  t.equal(html.status, 200);
  t.match(html.headers.get('content-type'), /text\/html/);
  t.equal(html.headers.get('content-security-policy'), PAGES_CSP);
  const body = await html.text();
  for (const text of ['/docs', '/openapi.json', '/v1/cdn/health/ready', '/metrics', 'edge-agent']) t.match(body, text);
  const hrefs = [...body.matchAll(/href="(\/[^"]*)"/g)].map((m) => m[1]!);
  t.ok(hrefs.length >= 8, 'links to the API, health and pages');
  for (const href of hrefs) {
    const res = await fetch(cp.url + href);
    t.equal(res.status, 200, `${href} answers`);
    await res.arrayBuffer();
  }

  const json = await cp.request('GET', '/', { headers: { accept: '*/*' } });
  t.equal(json.status, 200);
  t.match(json.body, { version: String, links: { docs: '/docs', openapi: '/openapi.json', readiness: '/v1/cdn/health/ready' } });
});

t.test('the index names the demo endpoint\'s real CDN hostname once an endpoint named demo exists', async (t) => {
  const cp = await startTestControlPlane(t);
  const index = async () => (await fetch(cp.url + '/', { headers: { accept: 'text/html' } })).text();
  t.notMatch(await index(), /id="demo-endpoint"/, 'no demo endpoint: no hostname');
  t.equal((await cp.request('GET', '/', { headers: { accept: '*/*' } })).body.demo_endpoint_hostname, null);

  const admin = await createAdmin(cp);
  await makeEndpoint(cp, admin, { name: 'not the demo' });
  const { endpoint } = await makeEndpoint(cp, admin, { name: DEMO_ENDPOINT_NAME });
  await makeEndpoint(cp, admin, { name: DEMO_ENDPOINT_NAME }); // a younger namesake: the demo command takes the oldest
  const html = await index();
  t.match(html, `<p id="demo-endpoint">The demo endpoint <code>demo</code> is served at <code>${endpoint.hostname}</code>`);
  t.match(html, `Host: ${endpoint.hostname}`);
  t.equal((await cp.request('GET', '/', { headers: { accept: '*/*' } })).body.demo_endpoint_hostname, endpoint.hostname);

  // The index does not depend on reading it: a failing query leaves the hostname out.
  await query(cp, 'alter table cdn_endpoint rename to cdn_endpoint_away');
  t.teardown(() => query(cp, 'alter table if exists cdn_endpoint_away rename to cdn_endpoint'));
  const without = await fetch(cp.url + '/', { headers: { accept: 'text/html' } });
  t.equal(without.status, 200);
  t.notMatch(await without.text(), /id="demo-endpoint"/);
  await query(cp, 'alter table cdn_endpoint_away rename to cdn_endpoint');
});

t.test('the verify-email link opens a page that confirms the address through the API, once', async (t) => {
  const cp = await startTestControlPlane(t);
  const { email } = await register(cp);
  const link = await emailedLink(cp, email, VERIFY_SUBJECT);
  t.equal(link.pathname, '/verify-email');

  const page = await openPage(link.href);
  t.equal(page.status, 200);
  t.equal(page.headers.get('content-security-policy'), PAGES_CSP);
  t.equal(page.headers.get('referrer-policy'), 'no-referrer', 'the token in the address never leaves as a Referer');
  t.notMatch(page.html, /<script>|<style>|\son\w+=/, 'no inline script, style or handler');
  await page.submit();
  t.equal(page.message().kind, 'error', 'neither the password nor a new one: nothing is sent');
  page.fill('password', 'Not-The-Password-1');
  await page.submit();
  t.equal(page.message().kind, 'error', page.message().text);
  page.fill('password', PASSWORD);
  await page.submit();
  t.same(page.message().kind, 'ok', page.message().text);
  t.equal(page.element('form').hidden, true);
  const session = await login(cp, email);
  const me = await cp.request('GET', '/v1/users/me', { headers: { authorization: `Bearer ${session.accessToken}` } });
  t.equal(me.body.data.email_verified, true);

  const again = await openPage(link.href);
  again.fill('password', PASSWORD);
  await again.submit();
  t.equal(again.message().kind, 'error');
  t.match(again.message().text, /invalid, has expired or was already used/);
});

t.test('the verify-email page lets an owner who did not choose the password choose a new one', async (t) => {
  const cp = await startTestControlPlane(t);
  const { email } = await register(cp, { password: OTHER_PASSWORD });
  const page = await openPage((await emailedLink(cp, email, VERIFY_SUBJECT)).href);
  page.fill('new-password', PASSWORD);
  page.fill('new-password-again', 'Something-else-1');
  await page.submit();
  t.match(page.message(), { kind: 'error', text: /differ/ });
  page.fill('new-password-again', PASSWORD);
  await page.submit();
  t.equal(page.message().kind, 'ok', page.message().text);
  t.equal((await login(cp, email, PASSWORD)).res.status, 200);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email, password: OTHER_PASSWORD } })).status, 401);
});

t.test('a link without its token says so and offers no form', async (t) => {
  const cp = await startTestControlPlane(t);
  for (const path of ['/verify-email', '/reset-password', '/accept-invitation']) {
    const page = await openPage(cp.url + path);
    t.equal(page.status, 200);
    t.equal(page.element('form').hidden, true, path);
    t.match(page.message(), { kind: 'error', text: /incomplete/ }, path);
  }
});

t.test('the reset-password link opens a page that sets the new password through the API; bad input changes nothing', async (t) => {
  const cp = await startTestControlPlane(t);
  const { email } = await register(cp);
  const forgot = await openPage(cp.url + '/forgot-password');
  forgot.fill('email', email);
  await forgot.submit();
  t.equal(forgot.message().kind, 'ok', forgot.message().text);
  const link = await emailedLink(cp, email, RESET_SUBJECT);
  t.equal(link.pathname, '/reset-password');

  const page = await openPage(link.href);
  page.fill('password', OTHER_PASSWORD);
  page.fill('password-again', 'Something-else-1');
  await page.submit();
  t.match(page.message(), { kind: 'error', text: /differ/ });
  page.fill('password', 'weak');
  page.fill('password-again', 'weak');
  await page.submit();
  t.match(page.message(), { kind: 'error', text: /new password/ }, 'the API names the field');
  await login(cp, email, PASSWORD); // still the old password (and the login voids the reset link)

  const forgotAgain = await openPage(cp.url + '/forgot-password');
  forgotAgain.fill('email', email);
  const since = new Date();
  await forgotAgain.submit();
  const message = await waitForMessage(outboxDir(cp), { to: email, subject: RESET_SUBJECT, since });
  const fresh = new URL(message.links.find((l) => l.includes('token='))!);
  const retry = await openPage(new URL(fresh.pathname + fresh.search, cp.url).href);
  retry.fill('password', OTHER_PASSWORD);
  retry.fill('password-again', OTHER_PASSWORD);
  await retry.submit();
  t.equal(retry.message().kind, 'ok', retry.message().text);
  await login(cp, email, OTHER_PASSWORD);
});

t.test('the sign-in page logs in through the API and names the account; a wrong password is refused', async (t) => {
  const cp = await startTestControlPlane(t);
  const { email } = await register(cp);
  const wrong = await openPage(cp.url + '/login');
  wrong.fill('email', email);
  wrong.fill('password', 'Not-the-password-1');
  await wrong.submit();
  t.equal(wrong.message().kind, 'error');
  const page = await openPage(cp.url + '/login');
  page.fill('email', email);
  page.fill('password', PASSWORD);
  await page.submit();
  t.match(page.message(), { kind: 'ok', text: `Signed in as ${email}` });
});

t.test('the invitation link opens its page, which sets the password through the API; the invitee then signs in', async (t) => {
  const cp = await startTestControlPlane(t);
  const admin = await createAdmin(cp, { display_name: 'Page Admin' });
  const email = uniqueEmail('invitee');
  const created = await cp.request('POST', '/v1/cdn/admin/users', { headers: bearer(admin.accessToken), json: { email, role: 'operator' } });
  t.equal(created.status, 201, created.text);
  const link = await emailedLink(cp, email, /invited to the .* CDN console/);
  t.equal(link.pathname, '/accept-invitation');
  const page = await openPage(link.href);
  t.equal(page.status, 200);
  page.fill('password', OTHER_PASSWORD);
  page.fill('password-again', OTHER_PASSWORD);
  await page.submit();
  t.match(page.message(), { kind: 'ok', text: /Your account is active/ });
  await login(cp, email, OTHER_PASSWORD);

  const spent = await openPage(link.href);
  spent.fill('password', OTHER_PASSWORD);
  spent.fill('password-again', OTHER_PASSWORD);
  await spent.submit();
  t.match(spent.message(), { kind: 'error', text: /invalid, has expired or was already used/ });
});

t.test('with APP_URL set, e-mailed links point at the front end instead of these pages', async (t) => {
  const cp = await startTestControlPlane(t, { env: { APP_URL: 'https://app.example.com/account/' } });
  const { email } = await register(cp, { email: uniqueEmail('front') });
  const message = await waitForMessage(outboxDir(cp), { to: email, subject: VERIFY_SUBJECT });
  t.match(message.links[0], /^https:\/\/app\.example\.com\/account\/verify-email\?token=/);
});

t.test('page assets: the script and style come from the control plane; an unknown asset is a 404', async (t) => {
  const cp = await startTestControlPlane(t);
  const script = await fetch(cp.url + '/pages/pages.js');
  t.equal(script.status, 200);
  t.match(script.headers.get('content-type'), /javascript/);
  await script.text();
  const missing = await cp.request('GET', '/pages/nope.js');
  t.equal(missing.status, 404);
  t.equal(missing.body.code, 'NOT_FOUND');
});

t.test('the pages serve a favicon: linked from every page and at /favicon.ico, where browsers look for one', async (t) => {
  const cp = await startTestControlPlane(t);
  for (const page of ['/', '/verify-email', '/login']) {
    const html = await (await fetch(cp.url + page, { headers: { accept: 'text/html' } })).text();
    t.match(html, '<link rel="icon" href="/pages/favicon.svg" type="image/svg+xml">', page);
  }
  for (const path of ['/pages/favicon.svg', '/favicon.ico']) {
    const icon = await fetch(cp.url + path);
    t.equal(icon.status, 200, path);
    t.equal(icon.headers.get('content-type'), 'image/svg+xml', path);
    t.match(await icon.text(), /^<svg /, path);
  }
});
