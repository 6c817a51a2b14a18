// Drive Neo4j Browser in headless Chromium (playwright-core + Debian's /usr/bin/chromium): load the
// KLineage style, connect, run the lineage query, wait for the graph, save a screenshot.
//
//   node browser_screenshot.cjs   (configured by the environment, see CONFIG below)
//
// Prints one JSON line: {"ok": true, "nodes": N, "relationships": M, "screenshot": path, "styled": bool}
// or {"ok": false, "error": "...", "screenshot": path-of-what-the-page-showed}.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

const CONFIG = {
  playwright: process.env.PLAYWRIGHT_CORE || 'playwright-core',
  chromium: process.env.CHROMIUM || '/usr/bin/chromium',
  browserUrl: process.env.BROWSER_URL || 'http://127.0.0.1:7474/browser/',
  boltUrl: process.env.BOLT_URL || 'bolt://127.0.0.1:7687',
  user: process.env.NEO4J_USER || 'neo4j',
  password: process.env.NEO4J_PASSWORD || 'klineage-test',
  grass: process.env.GRASS_FILE,
  queryFile: process.env.QUERY_FILE,
  out: process.env.SCREENSHOT || 'neo4j-browser-lineage.png',
  timeoutMs: Number(process.env.TIMEOUT_MS || 90000),
  arrangeChain: process.env.ARRANGE_CHAIN === '1',
};

// Lay a lineage chain out as a snake that reads left to right: drag the kernels captioned
// "<workload> v<i>" in order of i onto rows (Browser pins a dragged node), and each other node (a
// dead end) above the node it points to. Force layouts tangle a long chain; this only moves nodes.
async function arrangeChain(page) {
  const svg = await page.locator('svg').filter({ has: page.locator('g.node') }).first().boundingBox();
  const centre = async (g) => {
    const box = await g.locator('circle.b-outline').boundingBox();
    return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
  };
  const drag = async (g, to) => {
    const from = await centre(g);
    await page.mouse.move(from.x, from.y);
    await page.mouse.down();
    await page.mouse.move(to.x, to.y, { steps: 12 });
    await page.mouse.up();
    await page.waitForTimeout(150);
  };
  const all = await page.locator('svg g.node').all();
  const chain = [];
  const others = [];
  for (const g of all) {
    const text = await g.evaluate((el) => Array.from(el.querySelectorAll('text')).map((t) => t.textContent).join(' '));
    const m = /\bv(\d+)\b/.exec(text);
    if (m) chain.push({ g, i: Number(m[1]) }); else others.push(g);
  }
  chain.sort((a, b) => a.i - b.i);
  const perRow = Math.ceil(chain.length / 2);
  // the result frame's overview panel covers the right quarter of the canvas
  const left = svg.x + svg.width * 0.08;
  const step = (svg.width * 0.64) / Math.max(perRow - 1, 1);
  const rows = [svg.y + svg.height * 0.3, svg.y + svg.height * 0.6];
  const spots = chain.map((_, k) => {
    const row = Math.floor(k / perRow);
    const col = k % perRow;
    return { x: row === 0 ? left + col * step : left + (perRow - 1 - col) * step, y: rows[row] };
  });
  for (let k = 0; k < chain.length; k++) await drag(chain[k].g, spots[k]);
  const last = spots[spots.length - 1] || { x: svg.x + svg.width / 2, y: svg.y + svg.height / 2 };
  for (let k = 0; k < others.length; k++) {
    await drag(others[k], { x: last.x + (k - (others.length - 1) / 2) * 120, y: last.y + svg.height * 0.2 });
  }
  await page.mouse.click(svg.x + 20, svg.y + svg.height - 20);  // deselect
  await page.waitForTimeout(1500);
}

// GraSS text -> the object Browser keeps in localStorage["neo4j.grass"] ({selector: {prop: value}}).
function parseGrass(text) {
  const rules = {};
  const re = /([A-Za-z_.\-]+)\s*\{((?:[^{}"']|"[^"]*"|'[^']*')*)\}/g;
  let m;
  while ((m = re.exec(text)) !== null) {
    const props = {};
    let current = '';
    let quote = null;
    const parts = [];
    for (const ch of m[2]) {
      if (quote) { if (ch === quote) quote = null; else current += ch; continue; }
      if (ch === '"' || ch === "'") { quote = ch; continue; }
      if (ch === ';') { parts.push(current); current = ''; continue; }
      current += ch;
    }
    parts.push(current);
    for (const part of parts) {
      const i = part.indexOf(':');
      if (i > 0) props[part.slice(0, i).trim()] = part.slice(i + 1).trim();
    }
    rules[m[1]] = props;
  }
  return rules;
}

// The first query of a .cypher file of saved queries (comment lines dropped, up to the first ';').
function firstQuery(text) {
  const lines = text.split('\n').filter((l) => !l.trim().startsWith('//'));
  return lines.join('\n').split(';')[0].trim();
}

async function main() {
  const { chromium } = require(CONFIG.playwright);
  const query = firstQuery(fs.readFileSync(CONFIG.queryFile, 'utf8'));
  const grass = CONFIG.grass ? parseGrass(fs.readFileSync(CONFIG.grass, 'utf8')) : null;
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'klineage-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CONFIG.chromium,
    headless: true,
    viewport: { width: 1600, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(CONFIG.timeoutMs);
  const result = { ok: false, screenshot: CONFIG.out };
  try {
    if (grass) {
      await context.addInitScript((g) => {
        window.localStorage.setItem('neo4j.grass', JSON.stringify(g));
      }, grass);
    }
    const url = `${CONFIG.browserUrl}?dbms=${encodeURIComponent(`${CONFIG.boltUrl.replace('://', `://${CONFIG.user}@`)}`)}`;
    await page.goto(url, { waitUntil: 'domcontentloaded' });
    const password = page.locator('input[data-testid="password"]');
    await password.waitFor();
    const boltInput = page.locator('input[data-testid="boltaddress"]');
    if (await boltInput.count()) {
      await boltInput.fill(CONFIG.boltUrl);
    }
    const username = page.locator('input[data-testid="username"]');
    if (await username.count()) {
      await username.fill(CONFIG.user);
    }
    await password.fill(CONFIG.password);
    await page.locator('button[data-testid="connect"]').click();
    // Connected: the connect form goes away and the editor takes commands.
    await page.locator('input[data-testid="password"]').waitFor({ state: 'detached' });
    const editor = page.locator('#monaco-main-editor, [data-testid="activeEditor"]').first();
    await editor.click();
    await page.keyboard.insertText(query);
    await page.keyboard.press('Control+Enter');
    // The graph view: one svg node group per node.
    const nodes = page.locator('svg g.node');
    await nodes.first().waitFor();
    // Close the usage-data banner, show the graph frame full screen, and let the force layout settle.
    const banner = page.getByText('To help make Neo4j Browser better');
    if (await banner.count()) {
      const close = banner.locator('xpath=..').locator('button, [role="button"], span').last();
      await close.click({ timeout: 3000 }).catch(() => {});
    }
    const fullscreen = page.locator('button[title="Fullscreen"]').first();
    if (await fullscreen.count()) {
      await fullscreen.click({ timeout: 3000 }).catch(() => {});
    }
    await page.waitForTimeout(6000);
    if (CONFIG.arrangeChain) {
      await arrangeChain(page);
    }
    result.nodes = await nodes.count();
    result.relationships = await page.locator('svg g.relationship').count();
    const fills = await page.locator('svg g.node circle.b-outline').evaluateAll(
      (els) => Array.from(new Set(els.map((e) => (e.getAttribute('fill') || '').toUpperCase()))));
    result.fills = fills;
    // the captions drawn on the canvas (node and relationship text), so a test can read the picture
    result.captions = await page.locator('svg g.relationship text').evaluateAll(
      (els) => els.map((e) => (e.textContent || '').trim()).filter((t) => t));
    result.nodeCaptions = await nodes.evaluateAll((els) => els.map(
      (g) => Array.from(g.querySelectorAll('text')).map((t) => (t.textContent || '').trim()).join(' ').trim()));
    result.styled = grass ? Object.values(grass).some((r) => r.color && fills.includes(r.color.toUpperCase())) : null;
    result.ok = result.nodes > 0;
  } catch (err) {
    result.error = String(err && err.stack || err);
  }
  try {
    await page.screenshot({ path: CONFIG.out });
  } catch (err) {
    result.screenshotError = String(err);
  }
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(result.ok ? 0 : 1);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err) }) + '\n');
  process.exit(1);
});
