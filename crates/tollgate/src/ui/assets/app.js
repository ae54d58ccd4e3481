// tollgate dashboard. Every value from the gateway (paths, hosts, headers, bodies, model
// names: what clients and providers control) goes into the page as text — textContent,
// attribute values, SVG numbers — never as markup. No inline script: the CSP forbids it.
'use strict';

const $ = (sel) => document.querySelector(sel);

// An element with attributes and children; strings become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, String(v));
    else if (k === 'title') e.title = String(v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Makes `e` act on a click, or on Enter or Space once focused: a keyboard reaches what a
// mouse does (WCAG 2.1.1).
function activates(e, fn) {
  e.tabIndex = 0;
  e.addEventListener('click', fn);
  e.addEventListener('keydown', (k) => { if (k.key === 'Enter' || k.key === ' ') { k.preventDefault(); fn(); } });
  return e;
}

function fmtMs(v) {
  if (v === null || v === undefined) return '–';
  if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
  if (v >= 100) return v.toFixed(0);
  if (v >= 10) return v.toFixed(1);
  return v.toFixed(2);
}
function fmtNum(n) {
  if (n === null || n === undefined) return '–';
  if (typeof n !== 'number') return String(n);
  return n.toLocaleString('en-US', { maximumFractionDigits: 3 });
}
function fmtBytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
function fmtUsd(n) {
  if (n === null || n === undefined) return '–';
  return '$' + (n < 0.01 && n > 0 ? n.toPrecision(2) : n.toFixed(4));
}
function fmtUptime(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}
function clock(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString('en-GB', { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
}
function statusClass(s) { return 's' + String(s)[0]; }

// The admin API, with the session cookie; a lost session goes back to the login form.
async function api(path, opts) {
  const r = await fetch(path, Object.assign({ credentials: 'same-origin', cache: 'no-store' }, opts || {}));
  if (r.status === 401) { location.assign('/ui/login'); throw new Error('logged out'); }
  return r;
}
async function getJson(path) {
  const r = await api(path);
  return r.json();
}

// ---- views ----------------------------------------------------------------------------
const views = ['live', 'endpoints', 'remedies', 'config'];
const refreshers = {};
let current = null;
let timer = null;

function show() {
  const name = views.includes(location.hash.slice(1)) ? location.hash.slice(1) : 'live';
  current = name;
  for (const v of views) $('#view-' + v).hidden = v !== name;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  clearInterval(timer);
  const r = refreshers[name];
  if (r) { r.run(); timer = setInterval(() => { if (!document.hidden) r.run(); }, r.every); }
}

// ---- header ---------------------------------------------------------------------------
let summary = null;
async function refreshSummary() {
  try {
    summary = await getJson('/ui/api/summary');
  } catch (e) { return; }
  const m = summary.minute;
  $('#version').textContent = 'v' + summary.version;
  $('#rps').textContent = m.per_second.toFixed(m.per_second < 10 ? 2 : 0);
  $('#error-rate').textContent = (m.error_rate * 100).toFixed(m.errors ? 2 : 0) + ' %';
  $('#error-rate').className = m.errors ? 'err' : '';
  $('#p99').textContent = m.p99_ms === null ? '–' : fmtMs(m.p99_ms) + (m.p99_ms >= 1000 ? '' : ' ms');
  $('#uptime').textContent = fmtUptime(summary.uptime_s);
  $('#uptime').title = 'since ' + summary.started;
  $('#logout').hidden = !summary.login;
  const b = $('#banner');
  if (summary.draining) { b.textContent = 'This gateway is shutting down (draining).'; b.hidden = false; }
  else if (!summary.login && location.hostname !== '127.0.0.1' && location.hostname !== 'localhost' && location.hostname !== '[::1]') {
    b.textContent = 'No admin.token is set: anyone who reaches this admin listener sees this dashboard.'; b.hidden = false;
  } else b.hidden = true;
  renderFailures(summary.failures);
  renderLastReload(summary.last_reload);
}

// ---- live calls -----------------------------------------------------------------------
const MAX_ROWS = 500;
const calls = []; // newest first
let paused = false, missed = 0, dropped = 0, leftOut = 0, source = null, policiesSeen = new Set();

function matches(c) {
  const host = $('#filter-host').value.trim().toLowerCase();
  if (host && !(c.host || '').toLowerCase().includes(host)) return false;
  const st = $('#filter-status').value;
  if (st === 'error' && !c.error) return false;
  if (st && st !== 'error' && String(c.status)[0] !== st) return false;
  const p = $('#filter-policy').value;
  if (p === '-' && c.policy) return false;
  if (p && p !== '-' && c.policy !== p) return false;
  return true;
}

function llmCell(l) {
  if (!l) return '';
  const parts = [];
  if (l.model) parts.push(l.model);
  if (l.input_tokens !== undefined || l.output_tokens !== undefined) parts.push(`${fmtNum(l.input_tokens)}→${fmtNum(l.output_tokens)} tok`);
  if (l.cost_usd !== null && l.cost_usd !== undefined) parts.push(fmtUsd(l.cost_usd));
  return parts.join(' · ');
}

// An MCP call: its JSON-RPC method and the tool, prompt or resource it names.
function mcpCell(m) {
  if (!m) return '';
  return m.name ? `${m.method} · ${m.name}` : m.method;
}

function callRow(c) {
  const tr = el('tr', { class: c.har ? 'clickable' : null, 'data-id': c.id, title: c.har ? 'Show its HAR entry' : null },
    el('td', { class: 'mono' }, clock(c.t)),
    el('td', {}, c.method),
    el('td', { class: 'host' }, c.host || '–'),
    el('td', { class: 'wrap path', title: c.path || '' }, c.endpoint || c.path || '–'),
    el('td', { class: statusClass(c.status) + ' status' }, String(c.status)),
    el('td', { class: 'num ms' }, fmtMs(c.ms)),
    el('td', { class: 'policy' }, c.policy || ''),
    el('td', { class: 'actions' }, (c.actions || []).map((a) => el('span', { class: 'chip' }, a))),
    el('td', { class: 'error err' }, c.error || ''),
    el('td', { class: 'llm' }, llmCell(c.llm) || mcpCell(c.mcp)));
  if (c.har) activates(tr, () => showHar(c.id));
  return tr;
}

function renderCalls() {
  const body = $('#calls tbody');
  body.replaceChildren(...calls.filter(matches).map(callRow));
  $('#calls-empty').hidden = calls.length > 0;
}

function liveState() {
  const parts = [];
  parts.push(source && source.readyState === 1 ? 'streaming' : 'connecting…');
  if (paused) parts.push(`paused, ${missed} new`);
  if (leftOut) parts.push(`${leftOut} not shown (over 1 250 calls/s the view shows a sample)`);
  if (dropped) parts.push(`${dropped} skipped (this browser read too slowly)`);
  $('#live-state').textContent = parts.join(' · ');
}

function addPolicyOption(p) {
  if (!p || policiesSeen.has(p)) return;
  policiesSeen.add(p);
  $('#filter-policy').append(el('option', { value: p }, p));
}

function onCall(c) {
  calls.unshift(c);
  if (calls.length > MAX_ROWS) calls.length = MAX_ROWS;
  addPolicyOption(c.policy);
  if (paused) { missed++; liveState(); return; }
  if (current === 'live' && matches(c)) {
    const body = $('#calls tbody');
    body.prepend(callRow(c));
    while (body.rows.length > MAX_ROWS) body.deleteRow(-1);
    $('#calls-empty').hidden = true;
  }
}

function connect() {
  source = new EventSource('/ui/api/live');
  source.addEventListener('open', liveState);
  source.addEventListener('error', liveState);
  source.addEventListener('call', (e) => { try { onCall(JSON.parse(e.data)); } catch (_) { /* a line that is not JSON is skipped */ } });
  source.addEventListener('dropped', (e) => { try { dropped += JSON.parse(e.data).dropped; } catch (_) { } liveState(); });
  source.addEventListener('left_out', (e) => { try { leftOut += JSON.parse(e.data).left_out; } catch (_) { } liveState(); });
}

function renderFailures(list) {
  const rows = (list || []).slice().reverse().map((c) => el('tr', {},
    el('td', { class: 'mono' }, clock(c.t)), el('td', {}, c.method), el('td', {}, c.host || '–'),
    el('td', { class: 'wrap' }, c.endpoint || c.path || '–'),
    el('td', { class: statusClass(c.status) }, String(c.status)), el('td', { class: 'err' }, c.error || ''),
    el('td', { class: 'num' }, fmtMs(c.ms)), el('td', {}, c.policy || '')));
  $('#failures tbody').replaceChildren(...rows);
  $('#failures-empty').hidden = rows.length > 0;
}

// A block of text that may scroll: focusable, so a keyboard can scroll it (WCAG 2.1.1).
function pre(text, attrs) {
  return el('pre', { tabindex: '0', ...attrs }, text);
}

function headerTable(headers) {
  return el('table', { class: 'grid' }, el('tbody', {}, (headers || []).map((h) =>
    el('tr', {}, el('td', { class: 'mono' }, h.name), el('td', { class: 'mono wrap' }, h.value)))));
}

async function showHar(id) {
  const panel = $('#har'), body = $('#har-body');
  panel.hidden = false;
  body.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
  let entry;
  try {
    const r = await api('/ui/api/har/' + encodeURIComponent(id));
    if (!r.ok) { body.replaceChildren(el('p', { class: 'muted' }, (await r.json()).error)); return; }
    entry = await r.json();
  } catch (e) { body.replaceChildren(el('p', { class: 'err' }, String(e))); return; }
  const rq = entry.request || {}, rs = entry.response || {};
  const t = entry.timings || {};
  body.replaceChildren(
    el('dl', { class: 'kv' },
      el('dt', {}, 'request'), el('dd', { class: 'mono', id: 'har-url' }, `${rq.method} ${rq.url}`),
      el('dt', {}, 'response'), el('dd', { class: 'mono' }, `${rs.status} ${rs.statusText || ''}`),
      el('dt', {}, 'started'), el('dd', {}, entry.startedDateTime),
      el('dt', {}, 'time'), el('dd', {}, `${fmtMs(entry.time)} ms (blocked ${fmtMs(t.blocked)}, wait ${fmtMs(t.wait)}, receive ${fmtMs(t.receive)})`)),
    el('h3', {}, 'Request headers'), headerTable(rq.headers),
    ...(rq.postData ? [el('h3', {}, 'Request body'), pre(rq.postData.text || '', { id: 'har-request-body', 'aria-label': 'request body' })] : []),
    el('h3', {}, 'Response headers'), headerTable(rs.headers),
    el('h3', {}, 'Response body'), pre((rs.content && rs.content.text) || '', { 'aria-label': 'response body' }),
    el('h3', {}, 'Entry'), pre(JSON.stringify(entry, null, 2), { id: 'har-json', 'aria-label': 'HAR entry' }));
  panel.scrollIntoView({ block: 'nearest' });
}

// ---- endpoints ------------------------------------------------------------------------
let endpointRows = [];
let sortKey = 'count', sortDir = -1;

function sparkline(recent) {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', '0 0 124 24');
  const vals = (recent && recent.mean_ms) || [];
  const max = Math.max(0, ...vals.filter((v) => v !== null));
  if (!max) return svg;
  const step = 120 / Math.max(1, vals.length - 1);
  let pts = [];
  const flush = () => {
    if (!pts.length) return;
    const pl = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    pl.setAttribute('points', pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' '));
    svg.append(pl);
    pts = [];
  };
  vals.forEach((v, i) => {
    if (v === null) { flush(); return; }
    const x = 2 + i * step, y = 22 - (v / max) * 19;
    // A step alone between empty ones is a dot: a line needs two.
    if ((i === 0 || vals[i - 1] === null) && (i === vals.length - 1 || vals[i + 1] === null)) {
      const dot = document.createElementNS('http://www.w3.org/2000/svg', 'circle');
      dot.setAttribute('cx', x.toFixed(1)); dot.setAttribute('cy', y.toFixed(1)); dot.setAttribute('r', '2');
      svg.append(dot);
    } else pts.push([x, y]);
  });
  flush();
  const title = document.createElementNS('http://www.w3.org/2000/svg', 'title');
  title.textContent = `mean latency per ${recent.step_s} s, max ${fmtMs(max)} ms`;
  svg.append(title);
  return svg;
}

function statusMix(status, count) {
  const by = { 2: 0, 3: 0, 4: 0, 5: 0 };
  for (const [s, n] of Object.entries(status || {})) by[s[0]] = (by[s[0]] || 0) + n;
  const bar = el('span', { class: 'mix' });
  for (const k of ['2', '3', '4', '5']) {
    if (!by[k]) continue;
    const part = el('span', { class: 'b' + k });
    part.style.width = (100 * by[k] / Math.max(1, count)) + '%';
    bar.append(part);
  }
  const text = Object.entries(status || {}).map(([s, n]) => `${s}×${n}`).join(' ');
  return [bar, el('span', { class: 'mono' }, text)];
}

function sortValue(e, key) {
  switch (key) {
    case 'p50': case 'p95': case 'p99': return e.latency_ms ? e.latency_ms[key] : -1;
    case 'bytes': return e.request_bytes + e.response_bytes;
    case 'cost': return e.llm ? e.llm.cost_usd : -1;
    default: return e[key];
  }
}

function renderEndpoints() {
  const rows = endpointRows.slice().sort((a, b) => {
    const x = sortValue(a, sortKey), y = sortValue(b, sortKey);
    return (x < y ? -1 : x > y ? 1 : 0) * sortDir;
  });
  for (const th of document.querySelectorAll('#endpoints th[data-sort]')) {
    if (th.dataset.sort === sortKey) th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending'); else th.removeAttribute('aria-sort');
  }
  $('#endpoints tbody').replaceChildren(...rows.map((e) => {
    const l = e.latency_ms || {};
    return el('tr', { 'data-key': `${e.method} ${e.host} ${e.endpoint}` },
      el('td', { class: 'method' }, e.method), el('td', { class: 'host' }, e.host),
      el('td', { class: 'wrap endpoint' }, e.endpoint),
      el('td', { class: 'num count' }, fmtNum(e.count)),
      el('td', { class: 'mix-cell' }, statusMix(e.status, e.count)),
      el('td', { class: 'num p50' }, fmtMs(l.p50)), el('td', { class: 'num p95' }, fmtMs(l.p95)), el('td', { class: 'num p99' }, fmtMs(l.p99)),
      el('td', { class: 'num bytes' }, `${fmtBytes(e.request_bytes)} / ${fmtBytes(e.response_bytes)}`),
      el('td', { class: 'num llm' }, e.llm ? `${fmtNum(e.llm.input_tokens)}→${fmtNum(e.llm.output_tokens)} tok · ${fmtUsd(e.llm.cost_usd)}` : ''),
      el('td', {}, sparkline(e.recent)));
  }));
}

async function refreshEndpoints() {
  let d;
  try { d = await getJson('/discover?recent=true'); } catch (e) { return; }
  $('#discovery-off').hidden = d.enabled !== false;
  endpointRows = d.endpoints || [];
  const llm = endpointRows.filter((e) => e.llm);
  const box = $('#llm-total');
  box.hidden = llm.length === 0;
  if (llm.length) {
    const sum = (f) => llm.reduce((a, e) => a + (e.llm[f] || 0), 0);
    // What the cache answered instead of the provider: the calls, and what their answers
    // had cost when they were fetched.
    const saved = (f) => llm.reduce((a, e) => a + ((e.llm.saved || {})[f] || 0), 0);
    box.replaceChildren(el('div', { class: 'card', id: 'llm-spend' },
      el('h2', {}, 'LLM calls since start'),
      el('dl', { class: 'kv' },
        el('dt', {}, 'calls'), el('dd', { class: 'calls' }, fmtNum(sum('calls'))),
        el('dt', {}, 'tokens in / out'), el('dd', {}, `${fmtNum(sum('input_tokens'))} / ${fmtNum(sum('output_tokens'))}`),
        el('dt', {}, 'cost'), el('dd', { class: 'cost' }, fmtUsd(sum('cost_usd'))),
        el('dt', {}, 'from the cache'), el('dd', { class: 'saved-calls' }, `${fmtNum(saved('calls'))} ${saved('calls') === 1 ? 'call' : 'calls'}`),
        el('dt', {}, 'tokens saved in / out'), el('dd', { class: 'saved-tokens' }, `${fmtNum(saved('input_tokens'))} / ${fmtNum(saved('output_tokens'))}`),
        el('dt', {}, 'saved'), el('dd', { class: 'saved' }, fmtUsd(saved('cost_usd'))))));
  }
  renderEndpoints();
}

// ---- remedies -------------------------------------------------------------------------
// A remedy's state, as `/policies` reports it: known shapes get bars, the rest a list.
function gauge(label, used, limit, usedText, limitText) {
  const ratio = limit > 0 ? Math.min(1, used / limit) : 0;
  const fill = el('div', { class: 'fill' + (ratio >= 1 ? ' full' : ratio >= 0.8 ? ' high' : '') });
  fill.style.width = (ratio * 100).toFixed(1) + '%';
  const shown = (v, text) => (typeof text === 'string' ? text : fmtNum(v));
  return el('div', { class: 'bar' }, el('span', { class: 'track' }, fill),
    el('span', { class: 'label' }, `${label}: ${shown(used, usedText)} of ${shown(limit, limitText)}`));
}

// A number, or an amount written as text (`$4.99`): what a gauge can draw.
function amount(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && /^\$?[0-9]+(\.[0-9]+)?$/.test(v)) return parseFloat(v.replace('$', ''));
  return null;
}

function kv(obj) {
  const dl = el('dl', { class: 'kv' });
  for (const [k, v] of Object.entries(obj)) {
    dl.append(el('dt', {}, k), el('dd', { class: 'state-' + (typeof v === 'string' ? v : '') }, value(v)));
  }
  return dl;
}

function value(v) {
  if (v === null || v === undefined) return '–';
  if (Array.isArray(v)) {
    if (v.length && typeof v[0] === 'object') return el('div', {}, v.map((x) => el('div', { class: 'card' }, stateOf(x))));
    return v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ');
  }
  if (typeof v === 'object') return stateOf(v);
  if (typeof v === 'number') return fmtNum(v);
  return String(v);
}

// Pairs of (used, limit) names a remedy's state may carry.
const USED = [['used', 'limit'], ['in_use', 'max'], ['in_flight', 'max'], ['count', 'limit'], ['spent_usd', 'limit_usd'], ['tokens', 'limit'], ['entries', 'max_entries'], ['bytes', 'max_bytes'], ['queued', 'queue_capacity'], ['queue_depth', 'queue_capacity']];

function stateOf(s) {
  if (s === null || typeof s !== 'object') return value(s);
  const box = el('div', {});
  const rest = Object.assign({}, s);
  for (const [u, l] of USED) {
    const used = amount(s[u]), limit = amount(s[l]);
    if (used !== null && limit !== null) {
      box.append(gauge(u.replace(/_/g, ' '), used, limit, s[u], s[l]));
      delete rest[u]; delete rest[l];
    }
  }
  if (typeof s.hit_ratio === 'number') {
    box.append(gauge('hit ratio %', Math.round(s.hit_ratio * 1000) / 10, 100));
    delete rest.hit_ratio;
  }
  if (Object.keys(rest).length) box.append(kv(rest));
  return box;
}

function renderPolicies(p) {
  const out = (p.policies || []).map((pol) => {
    const card = el('div', { class: 'card policy', 'data-policy': pol.name },
      el('h3', {}, pol.name, ' ', el('span', { class: 'muted mono' }, JSON.stringify(pol.match))),
      el('div', {}, (pol.remedies || []).map((r) => el('span', { class: 'chip' }, r))));
    const list = el('div', { class: 'remedy-list' });
    for (const [remedy, st] of Object.entries(pol.state || {})) {
      const box = el('div', { class: 'remedy', 'data-remedy': remedy }, el('h4', {}, remedy), stateOf(st));
      if (remedy === 'cache') box.append(purgeButton(pol.name));
      list.append(box);
    }
    card.append(list);
    return card;
  });
  $('#policies').replaceChildren(...(out.length ? out : [el('p', { class: 'muted' }, 'No policy is configured: every call goes straight through.')]));
  $('#store').replaceChildren(el('div', { class: 'card', id: 'store-state' }, el('h2', {}, 'Shared store'), stateOf(p.store || {})));
  for (const pol of p.policies || []) addPolicyOption(pol.name);
}

function renderRemedyStats(s) {
  const scopes = s.policies || [];
  const blocks = scopes.map((sc) => {
    const max = Math.max(1, ...sc.actions.map((a) => a.count));
    return el('div', { class: 'card policy', 'data-stats': sc.policy },
      el('h3', {}, sc.policy, ' ', el('span', { class: 'muted' }, `${fmtNum(sc.requests)} requests`)),
      sc.actions.map((a) => {
        const fill = el('div', { class: 'fill' });
        fill.style.width = (100 * a.count / max).toFixed(1) + '%';
        return el('div', { class: 'bar', 'data-action': `${a.remedy}:${a.action}` }, el('span', { class: 'track' }, fill),
          el('span', { class: 'label' }, `${a.remedy} ${a.action}: `, el('span', { class: 'count' }, String(a.count)), ` (${(a.ratio * 100).toFixed(1)} %)`));
      }));
  });
  $('#remedy-stats').replaceChildren(...(blocks.length ? blocks : [el('p', { class: 'muted' }, 'No remedy has acted yet.')]));
}

// `POST /cache/purge` for one policy's cache (every replica's, for a shared one).
function purgeButton(policy) {
  const b = el('button', { type: 'button', class: 'purge', 'aria-label': `Purge the cache of ${policy}` }, 'Purge');
  b.addEventListener('click', async () => {
    b.disabled = true;
    try { await api('/cache/purge?policy=' + encodeURIComponent(policy), { method: 'POST' }); } catch (e) { /* the state below says */ }
    refreshRemedies();
  });
  return b;
}

async function refreshRemedies() {
  try {
    const [p, s] = await Promise.all([getJson('/policies'), getJson('/remedy-stats')]);
    renderPolicies(p);
    renderRemedyStats(s);
  } catch (e) { /* shown again on the next refresh */ }
}

// ---- config ---------------------------------------------------------------------------
function renderLastReload(r) {
  const box = $('#last-reload');
  if (!r) { box.className = 'muted'; box.textContent = 'No reload since start.'; return; }
  box.className = '';
  const parts = [el('p', { class: r.reloaded ? 's2' : 'err' }, `${r.at}: ${r.reloaded ? 'reloaded' : 'refused, the running config was kept'}`)];
  if (r.errors) parts.push(el('ul', {}, r.errors.map((e) => el('li', { class: 'mono' }, e))));
  if (r.diff) parts.push(pre(JSON.stringify(r.diff, null, 2), { 'aria-label': 'reload changes' }));
  box.replaceChildren(...parts);
}

async function refreshConfig() {
  try {
    const c = await getJson('/config');
    $('#config').textContent = JSON.stringify(c, null, 2);
  } catch (e) { /* shown again on the next refresh */ }
}

async function reload() {
  $('#reload-state').textContent = 'reloading…';
  try {
    const r = await api('/reload', { method: 'POST' });
    const j = await r.json();
    $('#reload-state').textContent = j.reloaded ? 'reloaded' : 'refused: ' + (j.errors || []).join('; ');
  } catch (e) { $('#reload-state').textContent = String(e); }
  refreshSummary();
  refreshConfig();
}

// ---- start ----------------------------------------------------------------------------
refreshers.live = { run: renderCalls, every: 60000 };
refreshers.endpoints = { run: refreshEndpoints, every: 5000 };
refreshers.remedies = { run: refreshRemedies, every: 3000 };
refreshers.config = { run: refreshConfig, every: 10000 };

document.addEventListener('DOMContentLoaded', () => {
  for (const id of ['#filter-host', '#filter-status', '#filter-policy']) $(id).addEventListener('input', renderCalls);
  $('#pause').addEventListener('click', () => {
    paused = !paused;
    $('#pause').setAttribute('aria-pressed', String(paused));
    $('#pause').textContent = paused ? 'Resume' : 'Pause';
    if (!paused) { missed = 0; renderCalls(); }
    liveState();
  });
  $('#har-close').addEventListener('click', () => { $('#har').hidden = true; });
  for (const th of document.querySelectorAll('#endpoints th[data-sort]')) {
    activates(th, () => {
      if (sortKey === th.dataset.sort) sortDir = -sortDir; else { sortKey = th.dataset.sort; sortDir = ['method', 'host', 'endpoint'].includes(sortKey) ? 1 : -1; }
      renderEndpoints();
    });
  }
  $('#reload').addEventListener('click', reload);
  window.addEventListener('hashchange', show);
  connect();
  refreshSummary();
  setInterval(() => { if (!document.hidden) refreshSummary(); }, 2000);
  getJson('/policies').then((p) => (p.policies || []).forEach((x) => addPolicyOption(x.name))).catch(() => { });
  show();
});
