import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/**
 * Debian's Chromium (`apt-get install -y chromium`; .ci/run installs it), or CHROMIUM_PATH. The
 * browser is never downloaded: a missing one fails the spec with this message, it is not skipped.
 */
export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  const found = candidates.find((p): p is string => !!p && fs.existsSync(p));
  if (!found) {
    throw new Error(`no Chromium found (looked for ${candidates.filter(Boolean).join(', ')}): install Debian's package with \`apt-get install -y chromium\` or set CHROMIUM_PATH`);
  }
  return found;
}

/** A headless Chromium (as root it needs --no-sandbox; /dev/shm is small in containers). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: chromiumPath(), headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'] });
}
