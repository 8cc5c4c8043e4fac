// The introspection page: plain HTML, CSS and a small script served by the program itself (no build
// step, nothing from a CDN). The script renders every topic of the JSON API (/api/v1) and polls the
// live ones; data is only ever set as text, never as markup, so names from config cannot inject.

export const INDEX_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ControlZ</title>
<link rel="stylesheet" href="/ctrlz.css">
<link rel="icon" href="data:,">
</head>
<body>
<header>
  <h1><span id="component">…</span> <small>introspection</small></h1>
  <nav id="nav"></nav>
  <span id="updated" class="muted"></span>
</header>
<main id="main"><p class="muted">Loading…</p></main>
<script src="/ctrlz.js"></script>
</body>
</html>
`;

export const STYLE_CSS = `:root { --fg: #1d2430; --muted: #6b7385; --line: #dde1e8; --accent: #2a64c5; --bad: #b3261e; --ok: #1e7b34; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: #f6f7f9; }
header { position: sticky; top: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; align-items: baseline; padding: 10px 20px; background: #1d2430; color: #fff; z-index: 1; }
header h1 { margin: 0; font-size: 17px; }
header small { font-weight: normal; opacity: .7; }
nav a { color: #cfe0ff; margin-right: 12px; text-decoration: none; }
nav a:hover { text-decoration: underline; }
main { padding: 16px 20px 40px; max-width: 1300px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; margin-bottom: 16px; }
h2 { font-size: 15px; margin: 0 0 10px; }
.muted { color: var(--muted); }
#updated { margin-left: auto; font-size: 12px; color: #aab3c5; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 8px; }
.card { border: 1px solid var(--line); border-radius: 4px; padding: 6px 10px; }
.card .k { font-size: 11px; text-transform: uppercase; letter-spacing: .03em; color: var(--muted); }
.card .v { font-size: 16px; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
td { font-variant-numeric: tabular-nums; word-break: break-word; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: 12.5px; }
input[type=search] { width: 100%; max-width: 320px; padding: 4px 8px; margin-bottom: 8px; border: 1px solid var(--line); border-radius: 4px; }
select { font: inherit; }
.state-SYNCED { color: var(--ok); }
.state-NACKED, .error { color: var(--bad); }
.tag { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px; background: #eef1f6; color: var(--muted); }
`;

export const SCRIPT_JS = `'use strict';
(() => {
  const LEVELS = ['debug', 'info', 'warn', 'error', 'fatal', 'none'];
  const main = document.getElementById('main');
  const sections = {};

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) e.append(c instanceof Node ? c : document.createTextNode(c == null ? '' : String(c)));
    return e;
  }

  async function api(path, init) {
    const res = await fetch(path, init);
    const body = await res.json();
    if (!res.ok) throw new Error(body.error || res.statusText);
    return body;
  }

  function table(headers, rows) {
    return el('table', {}, el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))), el('tbody', {}, rows));
  }

  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + ' ' + u[i];
  }

  function duration(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = Math.floor(s % 60);
    return (d ? d + 'd ' : '') + (d || h ? h + 'h ' : '') + (d || h || m ? m + 'm ' : '') + sec + 's';
  }

  function card(id, k, v) {
    return el('div', { class: 'card' }, el('div', { class: 'k' }, k), el('div', { class: 'v', id }, v));
  }

  /** A filter box above a table: hides rows whose text lacks the query. */
  function filtered(name, tbl) {
    const box = el('input', { type: 'search', placeholder: 'filter ' + name, 'aria-label': 'filter ' + name });
    box.addEventListener('input', () => {
      const q = box.value.toLowerCase();
      for (const tr of tbl.tBodies[0].rows) tr.hidden = q !== '' && !tr.textContent.toLowerCase().includes(q);
    });
    return [box, tbl];
  }

  const render = {
    process(p) {
      const loop = p.eventLoop;
      return [
        el('div', { class: 'cards' },
          card('process-pid', 'pid', p.pid),
          card('process-uptime', 'uptime', duration(p.uptimeSeconds)),
          card('process-rss', 'resident memory', bytes(p.memory.rssBytes)),
          card('process-heap', 'heap used / total', bytes(p.memory.heapUsedBytes) + ' / ' + bytes(p.memory.heapTotalBytes)),
          card('process-external', 'external', bytes(p.memory.externalBytes)),
          card('process-loop-p99', 'event-loop delay p99', loop.delayMs.p99 + ' ms'),
          card('process-loop-max', 'event-loop delay max', loop.delayMs.max + ' ms'),
          card('process-elu', 'event-loop utilisation', (loop.utilization * 100).toFixed(1) + ' %'),
        ),
        el('p', { class: 'muted' }, 'host ', p.hostname, ', parent pid ', p.ppid, ', started ', p.startTime, ', node ', p.node, ' on ', p.platform),
        el('h2', {}, 'Active handles and requests'),
        table(['type', 'count'], Object.entries(p.activeResources).sort().map(([k, v]) => el('tr', {}, el('td', { class: 'mono' }, k), el('td', {}, v)))),
      ];
    },
    version(v) {
      return table(['field', 'value'], Object.entries(v).map(([k, x]) => el('tr', {}, el('td', {}, k), el('td', { class: 'mono' }, x))));
    },
    args(a) {
      return [
        el('p', {}, el('code', {}, a.argv.join(' '))),
        ...filtered('flags', table(['flag', 'value', 'default', ''], a.flags.map((f) =>
          el('tr', {}, el('td', { class: 'mono' }, '--' + f.name), el('td', { class: 'mono' }, f.value), el('td', { class: 'mono muted' }, f.default),
            el('td', {}, f.explicit ? el('span', { class: 'tag' }, 'set') : '', ' ', f.effective ? '' : el('span', { class: 'tag' }, 'not yet effective')))))),
      ];
    },
    env(list) {
      return filtered('settings', table(['variable', 'value', 'default', ''], list.map((s) =>
        el('tr', {}, el('td', { class: 'mono', title: s.description }, s.name), el('td', { class: 'mono' }, s.value), el('td', { class: 'mono muted' }, s.default),
          el('td', {}, s.set ? el('span', { class: 'tag' }, 'set') : '', ' ', s.effective ? '' : el('span', { class: 'tag' }, 'not yet effective'))))));
    },
    scopes(list) {
      const status = el('p', { id: 'scope-status', class: 'muted' }, 'Changes apply at once; they last until the process restarts.');
      const put = async (name, field, value) => {
        try {
          const s = await api('/api/v1/scopes/' + encodeURIComponent(name), { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ [field]: value }) });
          status.className = 'muted';
          status.textContent = 'scope ' + s.name + ': output ' + s.outputLevel + ', stack traces ' + s.stackTraceLevel + ', callers ' + s.logCallers;
        } catch (e) {
          status.className = 'error';
          status.textContent = e.message;
        }
      };
      const levelSelect = (s, field) => {
        const sel = el('select', { id: 'scope-' + s.name + '-' + field, 'aria-label': s.name + ' ' + field }, LEVELS.map((l) => el('option', { value: l }, l)));
        sel.value = s[field];
        sel.addEventListener('change', () => put(s.name, field, sel.value));
        return sel;
      };
      return [status, ...filtered('scopes', table(['scope', 'output level', 'stack trace level', 'log callers'], list.map((s) => {
        const cb = el('input', { type: 'checkbox', id: 'scope-' + s.name + '-logCallers', 'aria-label': s.name + ' logCallers' });
        cb.checked = s.logCallers;
        cb.addEventListener('change', () => put(s.name, 'logCallers', cb.checked));
        return el('tr', {}, el('td', { class: 'mono' }, s.name), el('td', {}, levelSelect(s, 'outputLevel')), el('td', {}, levelSelect(s, 'stackTraceLevel')), el('td', {}, cb));
      })))];
    },
    metrics(list) {
      const rows = [];
      for (const m of list) {
        const values = m.values.length ? m.values : [{ labels: {}, value: 0 }];
        for (const v of values) {
          const labels = Object.entries(v.labels).map(([k, x]) => k + '=' + x).join(', ');
          rows.push(el('tr', {}, el('td', { class: 'mono', title: m.help }, v.series || m.name), el('td', { class: 'mono' }, labels), el('td', {}, v.value), el('td', { class: 'muted' }, m.type)));
        }
      }
      return filtered('metrics', table(['metric', 'labels', 'value', 'type'], rows));
    },
    proxies(list) {
      if (list.length === 0) return el('p', { class: 'muted', id: 'proxies-none' }, 'No proxy is connected.');
      return filtered('proxies', table(['proxy', 'peer', 'since', 'type', 'state', 'last push', 'version sent', 'acked'], list.flatMap((p) =>
        (p.types.length ? p.types : [{ type: '', state: '' }]).map((t, i) => el('tr', {},
          el('td', { class: 'mono' }, i ? '' : p.proxyId), el('td', { class: 'mono' }, i ? '' : p.peer + ' (' + p.protocol + ')'), el('td', {}, i ? '' : p.connectedAt),
          el('td', {}, t.type), el('td', { class: 'state-' + t.state, title: t.lastNack || '' }, t.state), el('td', {}, t.sentAt || ''),
          el('td', { class: 'mono' }, t.sentVersion || ''), el('td', { class: 'mono' }, t.ackedVersion || ''))))));
    },
  };

  // How often each topic is refetched, in ms; 0: once. Scopes are not polled while the page edits them.
  const REFRESH = { process: 2000, proxies: 2000, metrics: 5000, scopes: 5000, version: 0, args: 0, env: 30000 };

  async function load(topic) {
    const key = topic.path.split('/').pop();
    const sec = sections[key];
    try {
      const data = await api(topic.path);
      if (key === 'scopes' && sec.contains(document.activeElement) && document.activeElement.tagName === 'SELECT') return;
      const filter = sec.querySelector('input[type=search]');
      const query = filter ? filter.value : '';
      sec.replaceChildren(el('h2', {}, topic.title), ...[render[key](data)].flat());
      const again = sec.querySelector('input[type=search]');
      if (again && query) { again.value = query; again.dispatchEvent(new Event('input')); }
      document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      sec.replaceChildren(el('h2', {}, topic.title), el('p', { class: 'error' }, String(e.message || e)));
    }
  }

  (async () => {
    const index = await api('/api/v1');
    document.getElementById('component').textContent = index.component;
    document.title = index.component + ' – ControlZ';
    main.replaceChildren();
    const nav = document.getElementById('nav');
    for (const t of index.topics) {
      const key = t.path.split('/').pop();
      if (!render[key]) continue;
      sections[key] = el('section', { id: key, 'data-api': t.path }, el('h2', {}, t.title));
      main.append(sections[key]);
      nav.append(el('a', { href: '#' + key, title: t.help }, t.title));
      load(t);
      if (REFRESH[key]) setInterval(() => load(t), REFRESH[key]);
    }
  })().catch((e) => main.replaceChildren(el('p', { class: 'error' }, 'cannot reach the API: ' + e.message)));
})();
`;
