// Agent settings from environment and flags: the viewer request limits and the
// per-origin upload budget, with their defaults and the checks between them.
import t from 'tap';
import { ConfigError, loadConfig } from '../src/config.ts';

t.test('request limits and upload connections: defaults, env, flags, refusals', async (t) => {
  const d = loadConfig([], {});
  t.same([d.REQUEST_HEADERS_TIMEOUT_MS, d.REQUEST_TIMEOUT_MS, d.REQUEST_BODY_IDLE_TIMEOUT_MS, d.ORIGIN_UPLOAD_CONNECTIONS], [20_000, 300_000, 30_000, 32]);
  const c = loadConfig(['--request-timeout-ms', '0', '--origin-upload-connections=8'], { REQUEST_BODY_IDLE_TIMEOUT_MS: '5000' });
  t.same([c.REQUEST_TIMEOUT_MS, c.ORIGIN_UPLOAD_CONNECTIONS, c.REQUEST_BODY_IDLE_TIMEOUT_MS], [0, 8, 5000]);
  t.throws(() => loadConfig([], { REQUEST_HEADERS_TIMEOUT_MS: '30000', REQUEST_TIMEOUT_MS: '10000' }), new ConfigError('REQUEST_HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS (got "30000")'));
  t.throws(() => loadConfig(['--origin-upload-connections', '0'], {}), { message: /^ORIGIN_UPLOAD_CONNECTIONS: / });
});
