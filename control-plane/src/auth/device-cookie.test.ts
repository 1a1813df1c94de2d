import { randomBytes } from 'node:crypto';
import t from 'tap';
import { DEVICE_COOKIE_LIFETIME_SECONDS, issueDeviceCookie, verifyDeviceCookie } from './device-cookie.ts';

const app = { tokenPepper: randomBytes(32) };
const otherKey = { tokenPepper: randomBytes(32) };

t.test('a device cookie verifies for its login name until it expires, and names its device by a nonce', async (t) => {
  const now = Date.now();
  const value = issueDeviceCookie(app, 'ada@example.com', now);
  const nonce = verifyDeviceCookie(app, value, 'ada@example.com', now);
  t.match(nonce, /^[A-Za-z0-9_-]{22}$/);
  t.equal(verifyDeviceCookie(app, value, 'ada@example.com', now + (DEVICE_COOKIE_LIFETIME_SECONDS - 60) * 1000), nonce, 'valid just before expiry');
  t.equal(verifyDeviceCookie(app, value, 'ada@example.com', now + (DEVICE_COOKIE_LIFETIME_SECONDS + 1) * 1000), undefined, 'refused after expiry');
  t.equal(verifyDeviceCookie(app, value, 'grace@example.com', now), undefined, 'bound to the login name');
  t.equal(verifyDeviceCookie(otherKey, value, 'ada@example.com', now), undefined, 'bound to the key (another deployment\'s secrets key)');
  t.not(issueDeviceCookie(app, 'ada@example.com', now), value, 'a fresh nonce per issue');
  for (const bad of [undefined, '', 'x', `${value}x`, value.replace(/\./g, '-')]) {
    t.equal(verifyDeviceCookie(app, bad, 'ada@example.com', now), undefined, `refused: ${bad}`);
  }
});
