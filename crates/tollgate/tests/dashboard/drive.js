// Drives Debian's Chromium through the dashboard for tests/it/dashboard.rs, with
// playwright-core. One scenario per run (argv[2]); its settings come in the DASH
// environment variable (JSON). It prints one JSON object: what the pages showed. The Rust
// test asserts on it; this script only fails on what it cannot do (a page that never
// shows what it waits for).
'use strict';
const { chromium } = require('playwright-core');
const http = require('http');

const cfg = JSON.parse(process.env.DASH);
const out = {};

// A request through the gateway's proxy listener: absolute-form to `r.target` (the
// upstream by default), with `r.headers` and `r.body`.
function viaProxy(r) {
  return new Promise((resolve, reject) => {
    const [host, port] = cfg.proxy.split(':');
    const req = http.request({
      host, port: Number(port), method: r.method || 'GET', headers: r.headers || {},
      path: `http://${r.target || cfg.upstream}${r.path}`,
    }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
    req.on('error', reject);
    req.end(r.body || undefined);
  });
}

async function login(page) {
  await page.goto(cfg.base + '/ui');
  if (page.url().endsWith('/ui/login')) {
    await page.fill('#token', cfg.token);
    await page.click('button[type=submit]');
    await page.waitForURL(cfg.base + '/ui');
  }
}

async function shot(page, name) {
  if (cfg.shots) await page.screenshot({ path: `${cfg.shots}/${name}.png`, fullPage: false });
}

// Text of every cell of the rows of `table`, keyed by the row's data-key.
async function rows(page, table) {
  return page.$$eval(`${table} tbody tr`, (trs) => trs.map((tr) => ({
    key: tr.dataset.key || tr.dataset.id || null,
    cells: Object.fromEntries([...tr.cells].map((td, i) => [td.classList[td.classList.length - 1] || String(i), td.textContent])),
  })));
}

// axe-core's findings on the page as it is now: rule, impact and the elements it names.
// Injected through the debugging protocol, which the page's CSP does not govern.
async function axe(page) {
  await page.evaluate(`if (typeof axe === 'undefined') { ${require('fs').readFileSync(cfg.axe, 'utf8')} }`);
  return page.evaluate(async () => (await axe.run(document, { resultTypes: ['violations'] })).violations.map((v) => ({
    id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')),
  })));
}

const scenarios = {
  // Each view against known traffic: what it rendered.
  async views(page) {
    await login(page);
    await page.goto(cfg.base + '/ui#endpoints');
    await page.waitForSelector('#endpoints tbody tr');
    await page.waitForSelector('#endpoints svg.spark :is(polyline, circle)');
    await page.waitForFunction(() => document.querySelector('#rps').textContent !== '–');
    out.endpoints = await rows(page, '#endpoints');
    out.sparklines = await page.$$eval('#endpoints svg.spark', (svgs) => svgs.filter((s) => s.querySelector('polyline, circle')).length);
    out.llmSpend = await page.$eval('#llm-spend', (e) => e.textContent).catch(() => null);
    out.llmSaved = await page.$eval('#llm-spend', (e) => ({
      calls: e.querySelector('.saved-calls').textContent,
      tokens: e.querySelector('.saved-tokens').textContent,
      usd: e.querySelector('.saved').textContent,
    })).catch(() => null);
    out.header = {
      rps: await page.textContent('#rps'), errors: await page.textContent('#error-rate'),
      p99: await page.textContent('#p99'), uptime: await page.textContent('#uptime'), version: await page.textContent('#version'),
    };
    await shot(page, 'endpoints');
    // Sorting by p99, largest first.
    await page.click('#endpoints th[data-sort=p99]');
    out.sortedByP99 = (await rows(page, '#endpoints')).map((r) => r.key);
    await page.goto(cfg.base + '/ui#remedies');
    await page.waitForSelector('#policies .policy .remedy');
    await page.waitForSelector('#remedy-stats [data-action]');
    out.remedies = await page.$$eval('#policies .policy', (ps) => ps.map((p) => ({
      policy: p.dataset.policy,
      remedies: Object.fromEntries([...p.querySelectorAll('.remedy')].map((r) => [r.dataset.remedy, r.textContent])),
    })));
    out.store = await page.textContent('#store-state');
    out.stats = await page.$$eval('#remedy-stats [data-action]', (bs) => bs.map((b) => ({
      policy: b.closest('[data-stats]').dataset.stats, action: b.dataset.action, count: b.querySelector('.count').textContent,
    })));
    await shot(page, 'remedies');
    // A cache's Purge button: its entries go.
    const users = '#policies .policy[data-policy="users"] .remedy[data-remedy="cache"]';
    await page.click(users + ' button.purge');
    await page.waitForFunction((sel) => /entries0(?!\d)/.test(document.querySelector(sel).textContent), users);
    out.purged = await page.textContent(users);
    await page.goto(cfg.base + '/ui#config');
    await page.waitForFunction(() => document.querySelector('#config').textContent.length > 10);
    out.config = await page.textContent('#config');
    await page.click('#reload');
    await page.waitForFunction(() => /reloaded|refused/.test(document.querySelector('#reload-state').textContent));
    out.reloadState = await page.textContent('#reload-state');
    await page.waitForFunction(() => !document.querySelector('#last-reload').classList.contains('muted'));
    out.lastReload = await page.textContent('#last-reload');
    await shot(page, 'config');
    await page.goto(cfg.base + '/ui#live');
    await page.waitForSelector('#failures tbody tr');
    out.failures = await rows(page, '#failures');
    // A phone's screen: the header and the table still there, nothing wider than the page
    // but the scrolling tables.
    await page.setViewportSize({ width: 390, height: 800 });
    await page.goto(cfg.base + '/ui#endpoints');
    await page.waitForSelector('#endpoints tbody tr');
    out.phone = await page.evaluate(() => ({
      pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth,
      rpsVisible: document.querySelector('#rps').getBoundingClientRect().width > 0,
    }));
    await shot(page, 'phone');
  },

  // A new call in the live view, its time to appear, and its HAR entry.
  async live(page) {
    await login(page);
    await page.goto(cfg.base + '/ui#live');
    await page.waitForFunction(() => document.querySelector('#live-state').textContent.startsWith('streaming'));
    const status = await viaProxy({ path: cfg.path, headers: { 'x-tollgate-request-id': cfg.requestId } });
    const answered = Date.now();
    const sel = `#calls tbody tr[data-id="${cfg.requestId}"]`;
    await page.waitForSelector(sel, { timeout: 5000 });
    out.appearedAfterMs = Date.now() - answered;
    out.status = status;
    out.row = (await rows(page, '#calls')).find((r) => r.key === cfg.requestId);
    // Paused: a new call does not show until resumed.
    await page.click('#pause');
    await viaProxy({ path: cfg.path, headers: { 'x-tollgate-request-id': cfg.requestId + '-paused' } });
    await page.waitForFunction(() => /paused, 1 new/.test(document.querySelector('#live-state').textContent));
    out.shownWhilePaused = await page.$(`#calls tbody tr[data-id="${cfg.requestId}-paused"]`) !== null;
    await page.click('#pause');
    await page.waitForSelector(`#calls tbody tr[data-id="${cfg.requestId}-paused"]`);
    // Filtering by status class hides the 200s.
    await page.selectOption('#filter-status', '5');
    out.rowsWith5xxFilter = (await rows(page, '#calls')).length;
    await page.selectOption('#filter-status', '');
    await page.click(sel);
    await page.waitForSelector('#har-url');
    out.harUrl = await page.textContent('#har-url');
    out.harJson = await page.textContent('#har-json');
    // A call with a body: its entry shows the request body as text.
    if (cfg.postBody) {
      await viaProxy({ path: cfg.path, method: 'POST', body: cfg.postBody,
        headers: { 'content-type': 'application/json', 'x-tollgate-request-id': cfg.requestId + '-post' } });
      const post = `#calls tbody tr[data-id="${cfg.requestId}-post"]`;
      await page.waitForSelector(post, { timeout: 5000 });
      await page.click(post);
      await page.waitForSelector('#har-request-body');
      out.harRequestBody = await page.textContent('#har-request-body');
      out.harBodyHeadings = await page.$$eval('#har-body h3', (hs) => hs.map((h) => h.textContent));
    }
    for (const path of cfg.more || []) await viaProxy({ path });
    await page.waitForFunction((n) => document.querySelectorAll('#calls tbody tr').length >= n, 2 + (cfg.more || []).length);
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot(page, 'live');
  },

  // Login and logout with a token; what the browser kept.
  async login(page, context) {
    const first = await page.goto(cfg.base + '/ui');
    out.redirectedTo = page.url();
    out.csp = first.headers()['content-security-policy'] || null;
    await page.setViewportSize({ width: 900, height: 560 });
    await shot(page, 'login');
    await page.fill('#token', 'not-the-token');
    await page.click('button[type=submit]');
    await page.waitForURL(/\/ui\/login\?failed$/);
    out.failedMessage = await page.textContent('.failed');
    await page.fill('#token', cfg.token);
    await page.click('button[type=submit]');
    await page.waitForURL(cfg.base + '/ui');
    await page.waitForFunction(() => !document.querySelector('#logout').hidden);
    out.urlAfterLogin = page.url();
    out.cookies = await context.cookies();
    out.historyLength = await page.evaluate(() => history.length);
    out.summaryStatus = await page.evaluate(async () => (await fetch('/ui/api/summary')).status);
    // A state-changing request the page makes itself goes through (same origin).
    out.reloadStatus = await page.evaluate(async () => (await fetch('/reload', { method: 'POST' })).status);
    await page.click('#logout button');
    await page.waitForURL(cfg.base + '/ui/login');
    out.afterLogout = await page.evaluate(async () => (await fetch('/ui/api/summary')).status);
    out.cookiesAfterLogout = await context.cookies();
  },

  // Every view, the login page and an open HAR entry through axe-core.
  async axe(page) {
    out.axe = {};
    await page.goto(cfg.base + '/ui');
    await page.waitForSelector('#token');
    out.axe.login = await axe(page);
    await login(page);
    for (const path of ['/v1/users/1', '/v1/slow/report', '/v1/fail']) await viaProxy({ path });
    await page.goto(cfg.base + '/ui#live');
    await page.waitForFunction(() => document.querySelector('#live-state').textContent.startsWith('streaming'));
    await viaProxy({ path: '/v1/users/2', method: 'POST', body: '{"name":"ada"}',
      headers: { 'content-type': 'application/json', 'x-tollgate-request-id': 'axe-post' } });
    await page.waitForSelector('#failures tbody tr');
    await page.click('#calls tbody tr[data-id="axe-post"]');
    await page.waitForSelector('#har-request-body');
    out.axe.live = await axe(page);
    await page.goto(cfg.base + '/ui#endpoints');
    await page.waitForSelector('#endpoints tbody tr');
    out.axe.endpoints = await axe(page);
    await page.goto(cfg.base + '/ui#remedies');
    await page.waitForSelector('#policies .policy .remedy');
    out.axe.remedies = await axe(page);
    await page.goto(cfg.base + '/ui#config');
    await page.waitForFunction(() => document.querySelector('#config').textContent.length > 10);
    await page.click('#reload');
    await page.waitForFunction(() => !document.querySelector('#last-reload').classList.contains('muted'));
    out.axe.config = await axe(page);
    // A keyboard reaches what a mouse does: Tab lands on a call's row, Enter opens it.
    await page.goto(cfg.base + '/ui#live');
    await page.evaluate(() => { document.querySelector('#har').hidden = true; });
    await viaProxy({ path: '/v1/users/3', headers: { 'x-tollgate-request-id': 'axe-key' } });
    await page.waitForSelector('#calls tbody tr[data-id="axe-key"]');
    await page.focus('#calls tbody tr[data-id="axe-key"]');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.querySelector('#har').hidden && /users\/3/.test(document.querySelector('#har-url')?.textContent || ''));
    out.keyboardHar = await page.textContent('#har-url');
  },

  // Hostile values everywhere: nothing they carry may run.
  async hostile(page) {
    out.hits = [];
    await page.exposeBinding('__hit', (_, where) => { out.hits.push(String(where)); });
    out.violations = [];
    page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) out.violations.push(m.text()); });
    page.on('dialog', (d) => { out.hits.push('dialog: ' + d.message()); d.dismiss(); });
    await login(page);
    await page.goto(cfg.base + '/ui#live');
    await page.waitForFunction(() => document.querySelector('#live-state').textContent.startsWith('streaming'));
    for (const r of cfg.requests) out.statuses = (out.statuses || []).concat([await viaProxy(r).catch((e) => String(e))]);
    // A last, plain call, to know the live view is receiving.
    await viaProxy({ path: '/v1/end', headers: { 'x-tollgate-request-id': 'hostile-end' } });
    await page.waitForSelector('#calls tbody tr[data-id="hostile-end"]');
    // A call's record is sent when tollgate has finished with it, which may be just after
    // its client read the last byte: a busy machine can publish the last call before the
    // LLM one. Wait (bounded) for the rows the assertions look for; they fail if never.
    await page.waitForFunction(() => {
      const has = (sel, text) => [...document.querySelectorAll(sel)].some((td) => td.textContent.includes(text));
      return has('#calls tbody td.llm', "__hit('model')") && has('#calls tbody td.path', 'javascript:');
    }, null, { timeout: 10000 }).catch(() => null);
    out.livePaths = await page.$$eval('#calls tbody tr', (trs) => trs.map((tr) => tr.querySelector('.path').textContent));
    out.liveModels = await page.$$eval('#calls tbody td.llm', (tds) => tds.map((td) => td.textContent).filter(Boolean));
    out.liveHosts = await page.$$eval('#calls tbody td.host', (tds) => tds.map((td) => td.textContent));
    out.harShown = [];
    for (const tr of await page.$$('#calls tbody tr.clickable')) {
      await page.evaluate(() => document.querySelector('#har-body').replaceChildren());
      await tr.click();
      await page.waitForSelector('#har-url');
      out.harShown.push(await page.textContent('#har-body'));
    }
    const ready = { endpoints: '#endpoints tbody tr', remedies: '#policies .policy', config: '#config:not(:empty)', live: '#calls tbody tr' };
    for (const [v, sel] of Object.entries(ready)) {
      await page.goto(cfg.base + '/ui#' + v);
      await page.waitForSelector(sel);
    }
    await page.goto(cfg.base + '/ui#endpoints');
    await page.waitForSelector('#endpoints tbody tr');
    out.endpointTexts = await page.$$eval('#endpoints tbody td.endpoint', (tds) => tds.map((td) => td.textContent));
    out.injected = await page.evaluate(() => document.querySelectorAll('main img, main script, main iframe, main a[href^="javascript"]').length);
  },
};

(async () => {
  const browser = await chromium.launch({ executablePath: cfg.chromium, args: ['--no-sandbox'] });
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  try {
    await scenarios[process.argv[2]](page, context);
  } catch (e) {
    out.failure = String(e && e.stack || e);
    await shot(page, 'failure-' + process.argv[2]).catch(() => null);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})();
