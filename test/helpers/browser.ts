import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium; playwright-core downloads no browser of its own. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Launches headless Chromium. A missing or broken chromium fails with the reason (a throw in
 * beforeAll would only mark the tests skipped).
 */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: the browser tests drive Debian's chromium (apt-get install ` +
        `chromium), which .ci/run installs`,
    );
  try {
    return await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      // CI runs as root, where Chromium's sandbox cannot start.
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
  } catch (err) {
    throw new Error(`${CHROMIUM} did not start (.ci/run installs it): ${String(err)}`);
  }
}
