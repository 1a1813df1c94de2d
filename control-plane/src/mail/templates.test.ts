import t from 'tap';
import {
  appLink,
  escapeHtml,
  verificationEmail,
  passwordResetEmail,
  suspensionNotice,
  cdnAdminInvitation,
  dataExportReady,
  registrationAttemptNotice,
  addressConfirmedNotice,
} from './templates.ts';
import { extractLinks } from './outbox.ts';

const publicUrl = 'https://watch.example.test';
const token = 'abc_DEF-123+/=&x';

t.test('appLink keeps a path prefix and encodes the token', async (t) => {
  t.equal(appLink(publicUrl, '/verify-email', { token: 'a b&c' }), 'https://watch.example.test/verify-email?token=a+b%26c');
  t.equal(appLink('https://example.test/app', '/verify-email'), 'https://example.test/app/verify-email');
  t.equal(appLink('https://example.test/app/', 'login'), 'https://example.test/app/login');
  t.throws(() => appLink('javascript:alert(1)', '/x'), TypeError);
});

t.test('escapeHtml', async (t) => {
  t.equal(escapeHtml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
});

t.test('verification e-mail links to PUBLIC_URL/verify-email with the token', async (t) => {
  const mail = verificationEmail({ publicUrl, token, displayName: 'Ann' });
  t.match(mail.subject, /Confirm your e-mail/);
  const links = extractLinks(mail.text);
  t.equal(links.length, 1);
  const url = new URL(links[0]!);
  t.equal(url.origin + url.pathname, 'https://watch.example.test/verify-email');
  t.equal(url.searchParams.get('token'), token, 'token survives encoding');
  t.match(mail.text, /Hello Ann,/);
  t.match(mail.html, /<a href="https:\/\/watch\.example\.test\/verify-email\?token=abc_DEF-123%2B%2F%3D%26x">/);
});

t.test('verification e-mail tells an owner who did not sign up not to confirm, or to reset the password; a repeated one says nothing changed', async (t) => {
  const mail = verificationEmail({ publicUrl, token });
  t.match(mail.text, /If you did not create this account, do not confirm it: whoever did chose its password\. If you already confirmed it, reset the password \("Forgot your password\?" on the sign-in page\): that signs out every session/);
  t.notMatch(mail.text, /registered this address again/);
  const repeated = verificationEmail({ publicUrl, token, repeated: true });
  t.match(repeated.text, /Someone registered this address again\. .* nothing new was created: the account keeps the password chosen when the address was first registered/);
  t.equal(extractLinks(repeated.text).length, 1, 'the verification link stays the only link');
});

t.test('address confirmed notice: what to do if the owner did not sign up, with links to reset and sign in', async (t) => {
  const mail = addressConfirmedNotice({ publicUrl, displayName: 'Ann', productName: 'StreamCo' });
  t.equal(mail.subject, 'Your e-mail address for StreamCo is confirmed');
  t.match(mail.text, /Hello Ann,/);
  t.match(mail.text, /If you did not create this account, someone else chose its password and can sign in with it\. Reset the password now: that signs out every session, and only your new password works from then on\./);
  t.match(mail.text, /Every session opened before the confirmation was signed out/);
  t.same(extractLinks(mail.text), ['https://watch.example.test/forgot-password', 'https://watch.example.test/login']);
  t.notMatch(mail.text, /token=/);
});

t.test('password reset e-mail: link with token, 15 minutes', async (t) => {
  const mail = passwordResetEmail({ publicUrl, token });
  t.match(mail.text, /expires in 15 minutes/);
  const url = new URL(extractLinks(mail.text)[0]!);
  t.equal(url.pathname, '/reset-password');
  t.equal(url.searchParams.get('token'), token);
  t.match(passwordResetEmail({ publicUrl, token, expiresInMinutes: 30 }).text, /30 minutes/);
});

t.test('suspension notice carries the reason, escaped in HTML', async (t) => {
  const mail = suspensionNotice({ reason: 'Chargeback <fraud> & abuse' });
  t.match(mail.subject, /suspended/);
  t.match(mail.text, /Reason: Chargeback <fraud> & abuse/);
  t.match(mail.html, /Reason: Chargeback &lt;fraud&gt; &amp; abuse/);
  t.notMatch(mail.html, /<fraud>/);
  t.same(extractLinks(mail.text), []);
});

t.test('CDN admin invitation links to the password-setting page', async (t) => {
  const mail = cdnAdminInvitation({ publicUrl, token, role: 'operator', invitedBy: 'Ops Lead' });
  t.match(mail.text, /Ops Lead has invited you/);
  t.match(mail.text, /role "operator"/);
  const url = new URL(extractLinks(mail.text)[0]!);
  t.equal(url.pathname, '/accept-invitation');
  t.equal(url.searchParams.get('token'), token);
});

t.test('data export ready: the signed link as given, 24 hours', async (t) => {
  const downloadUrl = 'https://watch.example.test/v1/exports/e1/download?expires=1700000000&sig=abc';
  const mail = dataExportReady({ downloadUrl });
  t.same(extractLinks(mail.text), [downloadUrl]);
  t.match(mail.text, /expires in 24 hours/);
  t.match(mail.html, /expires=1700000000&amp;sig=abc/);
  t.throws(() => dataExportReady({ downloadUrl: '/relative' }), TypeError);
});

t.test('registration attempt notice: no token, points to login and reset', async (t) => {
  const mail = registrationAttemptNotice({ publicUrl, productName: 'StreamCo' });
  t.match(mail.subject, /Someone tried to create a StreamCo account/);
  t.same(extractLinks(mail.text).map((l) => new URL(l).pathname).sort(), ['/forgot-password', '/login']);
  t.notMatch(mail.text, /token=/);
});

t.test('every template has text and a complete HTML document', async (t) => {
  const all = [
    verificationEmail({ publicUrl, token }),
    passwordResetEmail({ publicUrl, token }),
    suspensionNotice({ reason: 'r' }),
    cdnAdminInvitation({ publicUrl, token, role: 'admin' }),
    dataExportReady({ downloadUrl: 'https://x.test/d' }),
    registrationAttemptNotice({ publicUrl }),
    addressConfirmedNotice({ publicUrl }),
  ];
  for (const m of all) {
    t.ok(m.subject.length > 0 && !/[\r\n]/.test(m.subject));
    t.ok(m.text.endsWith('\n'));
    t.match(m.html, /^<!doctype html>[\s\S]*<\/html>$/);
  }
});
