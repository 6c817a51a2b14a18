// Open KLineage's GraphiQL page in headless Chromium with every request outside the server refused,
// run the query of the page's ?q= parameter, save a screenshot.
//
//   node graphiql_screenshot.cjs   (PLAYWRIGHT_CORE, CHROMIUM, PAGE_URL, SCREENSHOT in the environment)
//
// Prints one JSON line: {"ok": bool, "blocked": [urls refused], "response": "result pane text", ...}.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

async function main() {
  const { chromium } = require(process.env.PLAYWRIGHT_CORE || 'playwright-core');
  const pageUrl = process.env.PAGE_URL;
  const origin = new URL(pageUrl).origin;
  const out = process.env.SCREENSHOT || 'graphiql-offline.png';
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'klineage-graphiql-'));  // empty profile
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 800 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run',
      // no name resolves and no host but the server's is reachable: the page must need nothing else
      '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'],
  });
  const result = { ok: false, blocked: [], failed: [], screenshot: out };
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(Number(process.env.TIMEOUT_MS || 60000));
  try {
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith(origin) || url.startsWith('data:')) return route.continue();
      result.blocked.push(url);
      return route.abort();
    });
    page.on('requestfailed', (r) => result.failed.push(r.url()));
    page.on('pageerror', (e) => result.failed.push(`page error: ${e}`));
    await page.goto(pageUrl, { waitUntil: 'load' });
    await page.locator('.graphiql-container .graphiql-query-editor').waitFor();
    await page.locator('.graphiql-execute-button').click();
    const response = page.locator('.graphiql-response');
    await response.getByText('"data"').waitFor();
    await page.waitForTimeout(500);
    result.response = await response.innerText();
    result.ok = true;
  } catch (err) {
    result.error = String(err && err.stack || err);
  }
  await page.screenshot({ path: out }).catch((e) => { result.screenshotError = String(e); });
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(result.ok ? 0 : 1);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err) }) + '\n');
  process.exit(1);
});
