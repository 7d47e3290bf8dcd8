// Muster console. Every name, label, message and plan output shown here is
// written by someone else (an agent, a user): it is only ever set with
// textContent or as an attribute value, never parsed as HTML.
'use strict';

const API = '/apis/muster.io/v1alpha1';
const HDR = { 'X-Muster-Console': '1', 'Accept': 'application/json' };
const ROW_H = 28;
const MAX_ROWS = 200;

const $ = (id) => document.getElementById(id);

// el builds an element; children are nodes or strings (as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c == null) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, opts) {
  opts = opts || {};
  const headers = Object.assign({}, HDR, opts.headers || {});
  const res = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body, credentials: 'same-origin', signal: opts.signal });
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { const b = await res.json(); if (b && b.message) msg = b.message; } catch (_) { /* not JSON */ }
    if (res.status === 401 && !opts.noSignin) showSignin('Your session has ended: sign in again.');
    throw new APIError(res.status, msg);
  }
  if (res.status === 204) return null;
  return res.json();
}

let session = null;
let stopView = () => {};

function showSignin(message) {
  stopView();
  session = null;
  $('signin-view').hidden = false;
  $('view').replaceChildren();
  $('nav').hidden = true;
  $('signout').hidden = true;
  $('who').textContent = '';
  $('signin-error').textContent = message || '';
}

async function signin(ev) {
  ev.preventDefault();
  const token = $('token').value;
  $('token').value = '';
  try {
    session = await api('/console/session', { method: 'POST', body: JSON.stringify({ token }), headers: { 'Content-Type': 'application/json' }, noSignin: true });
    started();
  } catch (e) {
    $('signin-error').textContent = e.message;
  }
}

async function signout() {
  try { await api('/console/session', { method: 'DELETE', noSignin: true }); } catch (_) { /* signed out anyway */ }
  showSignin('Signed out.');
}

function started() {
  $('signin-view').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  $('who').textContent = session.user + (session.groups && session.groups.length ? ' (' + session.groups.join(', ') + ')' : '');
  route();
}

function route() {
  if (!session) return;
  stopView();
  stopView = () => {};
  const h = location.hash || '#/';
  const view = $('view');
  view.replaceChildren();
  if (h.startsWith('#/machine/')) stopView = machinePage(view, decodeURIComponent(h.slice('#/machine/'.length)));
  else if (h === '#/registrations') stopView = registrationsPage(view);
  else stopView = fleetPage(view);
}

// watchList keeps `items` (a Map by name) in step with a collection: a
// paged list, then a streaming watch from its resourceVersion (newline-
// delimited JSON over fetch), re-listing when the watch is too old.
function watchList(path, params, onChange, onError) {
  const ctrl = new AbortController();
  const items = new Map();
  let stopped = false;
  const q = (extra) => {
    const u = new URLSearchParams(params);
    for (const [k, v] of Object.entries(extra)) u.set(k, v);
    return path + '?' + u.toString();
  };
  async function run() {
    while (!stopped) {
      let rv = '';
      try {
        items.clear();
        let cont = '';
        do {
          const list = await api(q(cont ? { limit: '500', continue: cont } : { limit: '500' }), { signal: ctrl.signal });
          for (const o of list.items || []) items.set(o.metadata.name, o);
          cont = list.metadata.continue || '';
          rv = list.metadata.resourceVersion;
        } while (cont);
        onChange(items);
        rv = await stream(rv);
      } catch (e) {
        if (stopped || e.name === 'AbortError') return;
        onError(e);
        if (e.status === 401) return;
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }
  async function stream(rv) {
    for (;;) {
      const res = await fetch(q({ watch: '1', resourceVersion: rv, allowWatchBookmarks: 'true' }), { headers: HDR, credentials: 'same-origin', signal: ctrl.signal });
      if (!res.ok) throw new APIError(res.status, 'watch: ' + res.status + ' ' + res.statusText);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        let changed = false;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const ev = JSON.parse(line);
          if (ev.type === 'ERROR') throw new APIError(ev.object && ev.object.code, 'watch expired');
          const o = ev.object;
          if (o && o.metadata && o.metadata.resourceVersion) rv = o.metadata.resourceVersion;
          if (ev.type === 'BOOKMARK') continue;
          if (ev.type === 'DELETED') items.delete(o.metadata.name);
          else items.set(o.metadata.name, o);
          changed = true;
        }
        if (changed) onChange(items);
      }
      // The server ended the watch (its timeout): go on from where it was.
    }
  }
  run();
  return () => { stopped = true; ctrl.abort(); };
}

// throttle runs fn at most once per animation frame.
function throttle(fn) {
  let queued = false;
  return (...args) => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; fn(...args); });
  };
}

function ago(ts) {
  if (!ts) return '—';
  const s = Math.round((Date.now() - Date.parse(ts)) / 1000);
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.round(s / 60) + 'm ago';
  if (s < 86400) return Math.round(s / 3600) + 'h ago';
  return Math.round(s / 86400) + 'd ago';
}

function phaseOf(m) { return (m.status && m.status.phase) || 'Pending'; }

// cards shows counts, the largest first, at most MAX_CARDS of them (a
// fleet of one-machine clusters would otherwise be thousands of cards).
const MAX_CARDS = 12;
function cards(title, counts, id) {
  const box = el('div', { class: 'cards', id });
  const all = [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  for (const [k, n] of all.slice(0, MAX_CARDS)) {
    box.append(el('div', { class: 'card' }, el('div', { class: 'n', text: String(n) }), el('div', { class: 'k', text: k })));
  }
  if (all.length > MAX_CARDS) {
    const rest = all.slice(MAX_CARDS).reduce((s, [, n]) => s + n, 0);
    box.append(el('div', { class: 'card' }, el('div', { class: 'n', text: String(rest) }), el('div', { class: 'k', text: 'in ' + (all.length - MAX_CARDS) + ' more' })));
  }
  return [el('h2', { text: title }), box];
}

function fleetPage(view) {
  const selector = el('input', { id: 'selector', placeholder: 'label selector, e.g. role=worker', size: '30' });
  const phase = el('select', { id: 'phase-filter' }, el('option', { value: '', text: 'all phases' }));
  for (const p of ['Pending', 'Provisioning', 'Registering', 'Bootstrapping', 'Running', 'Updating', 'Unavailable', 'Failed', 'Draining', 'Deleting']) phase.append(el('option', { value: p, text: p }));
  const total = el('span', { id: 'total', class: 'muted' });
  const live = el('span', { class: 'live', id: 'live' });
  const summary = el('div', { id: 'summary' });
  const rows = el('div', { class: 'rows', id: 'rows' });
  const spacer = el('div');
  rows.append(spacer);
  view.append(
    el('h1', { text: 'Fleet' }),
    el('div', { class: 'filters' }, selector, phase, el('button', { type: 'button', onclick: restart, text: 'Apply' }), total, live),
    summary,
    el('div', { class: 'grid-head' }, el('span', { text: 'Machine' }), el('span', { text: 'Cluster' }), el('span', { text: 'Phase' }), el('span', { text: 'Agent' }), el('span', { text: 'Last seen' })),
    rows);

  let sorted = [];
  const drawRows = () => {
    spacer.style.height = (sorted.length * ROW_H) + 'px';
    const first = Math.max(0, Math.floor(rows.scrollTop / ROW_H) - 20);
    const last = Math.min(sorted.length, first + MAX_ROWS);
    const out = [spacer];
    for (let i = first; i < last; i++) {
      const m = sorted[i];
      const st = m.status || {};
      const link = el('a', { href: '#/machine/' + encodeURIComponent(m.metadata.name), text: m.metadata.name });
      const r = el('div', { class: 'row', 'data-name': m.metadata.name },
        el('span', {}, link),
        el('span', { text: (m.spec && m.spec.cluster) || '' }),
        el('span', { class: 'phase phase-' + phaseOf(m), text: phaseOf(m) }),
        el('span', { text: st.agentVersion || '' }),
        el('span', { text: ago(st.lastSeen) }));
      r.style.top = (i * ROW_H) + 'px';
      out.push(r);
    }
    rows.replaceChildren(...out);
  };
  rows.addEventListener('scroll', throttle(drawRows));

  const render = throttle((items) => {
    const byPhase = new Map();
    const byCluster = new Map();
    const want = phase.value;
    sorted = [];
    for (const m of items.values()) {
      const p = phaseOf(m);
      byPhase.set(p, (byPhase.get(p) || 0) + 1);
      const c = (m.spec && m.spec.cluster) || '(none)';
      byCluster.set(c, (byCluster.get(c) || 0) + 1);
      if (!want || p === want) sorted.push(m);
    }
    sorted.sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
    summary.replaceChildren(...cards('By phase', byPhase, 'by-phase'), ...cards('By cluster', byCluster, 'by-cluster'));
    total.textContent = items.size + ' machines' + (want ? ', ' + sorted.length + ' ' + want : '');
    live.textContent = '● live';
    view.dataset.loaded = String(items.size);
    drawRows();
  });

  let stop = () => {};
  let last = new Map();
  function restart() {
    stop();
    const params = {};
    if (selector.value.trim()) params.labelSelector = selector.value.trim();
    stop = watchList(API + '/machines', params, (items) => { last = items; render(items); }, (e) => { live.textContent = ''; total.textContent = e.message; });
  }
  phase.addEventListener('change', () => render(last));
  selector.addEventListener('keydown', (e) => { if (e.key === 'Enter') restart(); });
  restart();
  return () => stop();
}

function kvTable(pairs) {
  const t = el('table', { class: 'kv' });
  for (const [k, v] of pairs) t.append(el('tr', {}, el('td', { text: k }), el('td', {}, v instanceof Node ? v : String(v == null ? '' : v))));
  return t;
}

function machinePage(view, name) {
  const head = el('h1', { text: name });
  const status = el('div', { id: 'machine-status' });
  const plan = el('div', { id: 'machine-plan' });
  const timeline = el('div', { id: 'machine-timeline' });
  view.append(el('p', {}, el('a', { href: '#/', text: '← Fleet' })), head, status, el('h2', { text: 'Plan' }), plan, el('h2', { text: 'History' }), timeline);

  const drawMachine = (m) => {
    if (!m) { status.replaceChildren(el('p', { class: 'error', text: 'Machine ' + name + ' does not exist (deleted, or never registered).' })); return; }
    const st = m.status || {};
    const labels = el('div', { id: 'labels' });
    for (const [k, v] of Object.entries(m.metadata.labels || {})) labels.append(el('div', { class: 'label', text: k + '=' + v }));
    const annotations = el('div', { id: 'annotations' });
    for (const [k, v] of Object.entries(m.metadata.annotations || {})) annotations.append(el('div', { text: k + '=' + v }));
    const addrs = (st.addresses || []).map((a) => a.type + ' ' + a.address).join(', ');
    status.replaceChildren(kvTable([
      ['Phase', el('span', { class: 'phase phase-' + phaseOf(m), text: phaseOf(m) })],
      ['Reason', st.reason || ''], ['Message', st.message || ''],
      ['Cluster', (m.spec && m.spec.cluster) || ''], ['Node', (m.spec && m.spec.nodeName) || ''],
      ['Roles', ((m.spec && m.spec.roles) || []).join(', ')],
      ['Agent version', st.agentVersion || ''], ['Addresses', addrs], ['Last seen', ago(st.lastSeen)],
      ['Labels', labels], ['Annotations', annotations],
    ]));
    const items = (st.transitions || []).slice().reverse().map((t) =>
      el('li', {}, el('span', { class: 'muted', text: t.time + ' ' }), t.from + ' → ' + t.to + ' (' + t.event + (t.reason ? ': ' + t.reason : '') + ')'));
    const events = timeline.querySelector('#events');
    timeline.replaceChildren(el('ul', { class: 'timeline', id: 'transitions' }, ...items), events || el('div', { id: 'events' }));
  };
  const drawPlan = (p) => {
    if (!p) { plan.replaceChildren(el('p', { class: 'muted', text: 'No plan.' })); return; }
    const st = p.status || {};
    const outs = (st.output || []).map((o) => el('div', {}, el('div', { class: 'muted', text: o.name + ' (exit ' + o.exitCode + ')' }), el('pre', { class: 'output', text: o.output || '' })));
    plan.replaceChildren(kvTable([['State', st.state || 'pending'], ['Checksum', st.checksum || ''], ['Applied', st.appliedChecksum || ''], ['Failures', st.failureCount || 0], ['Message', st.message || '']]), ...outs);
  };
  const drawEvents = async () => {
    try {
      const list = await api('/api/v1/events?fieldSelector=' + encodeURIComponent('involvedObject.kind=Machine,involvedObject.name=' + name));
      const evs = (list.items || []).sort((a, b) => (a.lastTimestamp || '') < (b.lastTimestamp || '') ? 1 : -1);
      const box = el('div', { id: 'events' }, el('h2', { text: 'Events' }));
      const t = el('table');
      for (const e of evs) t.append(el('tr', {}, el('td', { class: 'muted', text: e.lastTimestamp || e.eventTime || '' }), el('td', { text: e.type || '' }), el('td', { text: e.reason || '' }), el('td', { text: e.message || '' })));
      box.append(t);
      const old = timeline.querySelector('#events');
      if (old) old.replaceWith(box); else timeline.append(box);
    } catch (e) { /* shown by the other views */ }
  };
  const sel = { fieldSelector: 'metadata.name=' + name };
  const s1 = watchList(API + '/machines', sel, throttle((items) => { drawMachine(items.get(name)); drawEvents(); }), (e) => status.replaceChildren(el('p', { class: 'error', text: e.message })));
  const s2 = watchList(API + '/machineplans', sel, throttle((items) => drawPlan(items.get(name))), (e) => plan.replaceChildren(el('p', { class: 'error', text: e.message })));
  return () => { s1(); s2(); };
}

function registrationsPage(view) {
  const box = el('div', { id: 'registrations' });
  const note = el('p', { class: 'muted', id: 'reg-note' });
  view.append(el('h1', { text: 'Pending registrations' }), note, box);
  let mayDecide = null; // unknown until checked with a dry run

  // mayDecide is asked of the server: the same patch with dryRun=All; a
  // 403 means this user may not, and no button is shown.
  const check = async (name) => {
    try {
      await api(API + '/clusterregistrations/' + encodeURIComponent(name) + '/status?dryRun=All', patchOpts('Approved'));
      return true;
    } catch (e) {
      return e.status !== 403 ? true : false;
    }
  };
  const decide = async (name, ph) => {
    try {
      await api(API + '/clusterregistrations/' + encodeURIComponent(name) + '/status', patchOpts(ph));
      note.textContent = 'Registration ' + name + ': ' + ph.toLowerCase() + '.';
    } catch (e) { note.textContent = e.message; }
  };
  const render = throttle(async (items) => {
    const pending = [...items.values()].filter((r) => !r.status || !r.status.phase || r.status.phase === 'Pending')
      .sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
    if (pending.length && mayDecide === null) mayDecide = await check(pending[0].metadata.name);
    const t = el('table', {}, el('tr', {}, ...['Registration', 'Node', 'Cluster', 'Labels', 'Created', ''].map((h) => el('th', { text: h }))));
    for (const r of pending) {
      const sp = r.spec || {};
      const act = el('td');
      if (mayDecide) {
        act.append(el('button', { class: 'approve', type: 'button', 'data-name': r.metadata.name, text: 'Approve', onclick: () => decide(r.metadata.name, 'Approved') }), ' ',
          el('button', { class: 'deny', type: 'button', 'data-name': r.metadata.name, text: 'Deny', onclick: () => decide(r.metadata.name, 'Denied') }));
      }
      t.append(el('tr', { class: 'registration', 'data-name': r.metadata.name },
        el('td', { text: r.metadata.name }), el('td', { text: sp.nodeName || '' }), el('td', { text: (r.status && r.status.cluster) || '' }),
        el('td', { text: Object.entries(sp.labels || {}).map(([k, v]) => k + '=' + v).join(', ') }),
        el('td', { text: ago(r.metadata.creationTimestamp) }), act));
    }
    box.replaceChildren(pending.length ? t : el('p', { class: 'muted', text: 'No registration is waiting for approval.' }));
    box.dataset.count = String(pending.length);
  });
  return watchList(API + '/clusterregistrations', {}, render, (e) => { note.textContent = e.message; });
}

function patchOpts(ph) {
  const reason = ph === 'Approved' ? 'ApprovedByOperator' : 'DeniedByOperator';
  return { method: 'PATCH', headers: { 'Content-Type': 'application/merge-patch+json' }, body: JSON.stringify({ status: { phase: ph, reason, message: 'from the web console' } }) };
}

async function boot() {
  $('signin').addEventListener('submit', signin);
  $('signout').addEventListener('click', signout);
  window.addEventListener('hashchange', route);
  try {
    session = await api('/console/session', { noSignin: true });
    started();
  } catch (e) {
    showSignin('');
  }
}

window.musterConsoleLoaded = true;
document.addEventListener('DOMContentLoaded', boot);
