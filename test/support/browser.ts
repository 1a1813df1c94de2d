// A real headless browser for the tests of the pages and /docs: Debian's
// Chromium (apt-get install chromium) driven by playwright-core, which
// downloads no browser of its own. CHROMIUM_PATH names another binary.
import { accessSync, constants } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

interface Teardown { teardown(fn: () => unknown): void }

export const CHROMIUM_INSTALL_HINT = 'Chromium is not installed: apt-get install chromium (or set CHROMIUM_PATH to a Chromium or Chrome binary)';

/** How long launching may take and how long one page action waits by default. */
const LAUNCH_TIMEOUT_MS = 30_000;
export const ACTION_TIMEOUT_MS = 30_000;

/** The Chromium binary: CHROMIUM_PATH, else the first executable of Debian's names on the usual paths; undefined when none. */
export function chromiumPath(env = process.env): string | undefined {
  const candidates = env.CHROMIUM_PATH ? [env.CHROMIUM_PATH] : ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  return candidates.find((file) => {
    try {
      accessSync(file, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Launches headless Chromium for one test file, closed by its teardown. */
export async function launchBrowser(t: Teardown, executablePath: string): Promise<Browser> {
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  const browser = await chromium.launch({ executablePath, headless: true, timeout: LAUNCH_TIMEOUT_MS, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  t.teardown(() => browser.close());
  return browser;
}
