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
  else if (h === '#/tokens') stopView = tokensPage(view);
  else if (h === '#/rollouts') stopView = rolloutsPage(view);
  else stopView = fleetPage(view);
}

// A user with cluster-scoped access (session.scoped) may list these
// collections only with their clusters selected (spec.cluster=NAME): the
// console keeps one list and watch per cluster and shows their union.
const SCOPED_FIELD = { machines: 'spec.cluster', machinepools: 'spec.cluster', machineplansets: 'spec.cluster', clusterregistrations: 'spec.cluster', clusterregistrationtokens: 'spec.cluster' };

function watchScoped(path, params, onChange, onError) {
  const field = SCOPED_FIELD[path.split('/').pop()];
  if (!session || !session.scoped || !field || (params.fieldSelector || '').includes(field + '=')) return watchList(path, params, onChange, onError);
  const parts = new Map();
  const stops = [];
  const clusters = session.clusters || [];
  for (const c of clusters) {
    const p = Object.assign({}, params);
    p.fieldSelector = (p.fieldSelector ? p.fieldSelector + ',' : '') + field + '=' + c;
    stops.push(watchList(path, p, (items, names) => {
      parts.set(c, items);
      const all = new Map();
      for (const m of parts.values()) for (const [k, v] of m) all.set(k, v);
      onChange(all, names);
    }, onError));
  }
  if (!clusters.length) onChange(new Map(), true);
  return () => { for (const stop of stops) stop(); };
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
        onChange(items, true);
        rv = await stream(rv);
      } catch (e) {
        if (stopped || e.name === 'AbortError') return;
        onError(e);
        // A 403 will not change by asking again: the user's groups decide.
        if (e.status === 401 || e.status === 403) return;
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
        let names = false;
        // Lines are cut by index and the rest kept once per chunk: slicing
        // the buffer per line copied it once per event (quadratic in a
        // chunk of thousands of events).
        let at = 0;
        while ((nl = buf.indexOf('\n', at)) >= 0) {
          const line = buf.slice(at, nl);
          at = nl + 1;
          if (!line.trim()) continue;
          const ev = JSON.parse(line);
          if (ev.type === 'ERROR') throw new APIError(ev.object && ev.object.code, 'watch expired');
          const o = ev.object;
          if (o && o.metadata && o.metadata.resourceVersion) rv = o.metadata.resourceVersion;
          if (ev.type === 'BOOKMARK') continue;
          if (ev.type === 'DELETED') items.delete(o.metadata.name);
          else items.set(o.metadata.name, o);
          if (ev.type !== 'MODIFIED') names = true;
          changed = true;
        }
        buf = buf.slice(at);
        if (changed) onChange(items, names);
      }
      // The server ended the watch (its timeout): go on from where it was.
    }
  }
  run();
  return () => { stopped = true; ctrl.abort(); };
}

// every runs fn at most once per ms milliseconds, with the last call's
// arguments, in an animation frame: a fleet whose machines change all the
// time is redrawn a few times a second, not on every frame, so the page
// stays free to scroll and click.
function every(ms, fn) {
  let last = -Infinity;
  let timer = null;
  let args = null;
  return (...a) => {
    args = a;
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      last = performance.now();
      const run = args;
      args = null;
      requestAnimationFrame(() => fn(...run));
    }, Math.max(0, last + ms - performance.now()));
  };
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
  const cluster = el('input', { id: 'cluster-filter', placeholder: 'cluster', size: '14' });
  const total = el('span', { id: 'total', class: 'muted' });
  const live = el('span', { class: 'live', id: 'live' });
  const summary = el('div', { id: 'summary' });
  const rows = el('div', { class: 'rows', id: 'rows' });
  const spacer = el('div');
  rows.append(spacer);
  view.append(
    el('h1', { text: 'Fleet' }),
    el('div', { class: 'filters' }, selector, cluster, phase, el('button', { type: 'button', onclick: restart, text: 'Apply' }), total, live),
    summary,
    el('div', { class: 'grid-head' }, el('span', { text: 'Machine' }), el('span', { text: 'Cluster' }), el('span', { text: 'Phase' }), el('span', { text: 'Agent' }), el('span', { text: 'Last seen' })),
    rows);

  // sorted is the machines' names in order; it is sorted again only when
  // names came or went, not on every status change.
  let sorted = [];
  let current = new Map();
  let resort = true;
  const drawRows = () => {
    spacer.style.height = (sorted.length * ROW_H) + 'px';
    const first = Math.max(0, Math.floor(rows.scrollTop / ROW_H) - 20);
    const last = Math.min(sorted.length, first + MAX_ROWS);
    const out = [spacer];
    for (let i = first; i < last; i++) {
      const m = current.get(sorted[i]);
      if (!m) continue;
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

  const render = every(250, (items) => {
    const byPhase = new Map();
    const byCluster = new Map();
    current = items;
    for (const m of items.values()) {
      const p = phaseOf(m);
      byPhase.set(p, (byPhase.get(p) || 0) + 1);
      const c = (m.spec && m.spec.cluster) || '(none)';
      byCluster.set(c, (byCluster.get(c) || 0) + 1);
    }
    if (resort) {
      sorted = [...items.keys()].sort();
      resort = false;
    }
    summary.replaceChildren(...cards('By phase', byPhase, 'by-phase'), ...cards('By cluster', byCluster, 'by-cluster'));
    total.textContent = items.size + ' machines' + (filtered ? ' match the filters' : '');
    live.textContent = '● live';
    view.dataset.loaded = String(items.size);
    drawRows();
  });

  // Every filter is the server's (label and field selectors on the list
  // and the watch): the browser holds only the machines it shows, and a
  // machine that leaves the filter arrives as a deletion.
  let stop = () => {};
  let filtered = false;
  function restart() {
    stop();
    const params = {};
    const fields = [];
    if (selector.value.trim()) params.labelSelector = selector.value.trim();
    if (cluster.value.trim()) fields.push('spec.cluster=' + cluster.value.trim());
    if (phase.value) fields.push('status.phase=' + phase.value);
    if (fields.length) params.fieldSelector = fields.join(',');
    filtered = Object.keys(params).length > 0;
    resort = true;
    stop = watchScoped(API + '/machines', params, (items, names) => { if (names) resort = true; render(items); }, (e) => { live.textContent = ''; total.textContent = e.message; });
  }
  phase.addEventListener('change', restart);
  cluster.addEventListener('keydown', (e) => { if (e.key === 'Enter') restart(); });
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
    drawTimeline(m);
  };
  // The timeline: every transition the datastore kept (machines/<name>/
  // history, also those of earlier machines of this name), then the
  // machine's own last 20 (status.transitions) that the history writer
  // has not recorded yet. On etcd there is no history: the last 20 only.
  let history = null;
  const drawTimeline = (m) => {
    const st = (m && m.status) || {};
    const uid = m && m.metadata.uid;
    const rows = [];
    const seen = new Set();
    for (const h of (history ? history.items : [])) {
      rows.push({ time: h.at, from: h.from, to: h.to, event: h.event, reason: h.reason, by: h.by, earlier: !!uid && h.uid !== uid });
      if (h.uid === uid) seen.add(h.seq);
    }
    for (const t of st.transitions || []) {
      if (!seen.has(t.seq)) rows.push({ time: t.time, from: t.from, to: t.to, event: t.event, reason: t.reason, by: t.by });
    }
    const items = rows.reverse().map((t) =>
      el('li', { class: t.earlier ? 'earlier' : '' }, el('span', { class: 'muted', text: t.time + ' ' }),
        t.from + ' → ' + t.to + ' (' + t.event + (t.reason ? ': ' + t.reason : '') + ')' + (t.by ? ' by ' + t.by : '') + (t.earlier ? ' — an earlier machine of this name' : '')));
    const note = el('p', { class: 'muted', id: 'history-note', text: history
      ? (history.truncated ? 'The newest ' + history.items.length + ' transitions kept by the datastore.' : 'Every transition kept by the datastore.')
      : 'The last ' + (st.transitions || []).length + ' transitions (this server keeps no older history).' });
    const events = timeline.querySelector('#events');
    timeline.replaceChildren(note, el('ul', { class: 'timeline', id: 'transitions' }, ...items), events || el('div', { id: 'events' }));
  };
  const loadHistory = async (m) => {
    try {
      history = await api(API + '/machines/' + encodeURIComponent(name) + '/history?limit=500');
    } catch (e) { history = null; }
    drawTimeline(m);
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
  const s1 = watchScoped(API + '/machines', sel, throttle((items) => { drawMachine(items.get(name)); drawEvents(); loadHistory(items.get(name)); }), (e) => status.replaceChildren(el('p', { class: 'error', text: e.message })));
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
  return watchScoped(API + '/clusterregistrations', {}, render, (e) => { note.textContent = e.message; });
}

function patchOpts(ph) {
  const reason = ph === 'Approved' ? 'ApprovedByOperator' : 'DeniedByOperator';
  return { method: 'PATCH', headers: { 'Content-Type': 'application/merge-patch+json' }, body: JSON.stringify({ status: { phase: ph, reason, message: 'from the web console' } }) };
}

// allowed asks the server whether this user may make a request: the same
// request with dryRun=All. Only a 403 means no; any other answer (a 422
// for a stale object, a 409) says the authorizer let it through.
async function allowed(path, opts) {
  try {
    await api(path + (path.includes('?') ? '&' : '?') + 'dryRun=All', opts);
    return true;
  } catch (e) {
    return e.status !== 403;
  }
}

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const sha256 = async (bytes) => hex(await crypto.subtle.digest('SHA-256', bytes));

// newJoinToken makes a join token the way 'muster-server token create'
// does (internal/jointoken): a random id and 128-bit secret drawn here, the
// secret's SHA-256 sent as the object's secretHash, the full token pinned
// to the SHA-256 of what /cacerts serves. The secret never leaves this
// function but in the returned string, which is shown once and not kept.
async function newJoinToken() {
  const res = await fetch('/cacerts', { credentials: 'omit' });
  if (!res.ok) throw new APIError(res.status, 'reading the server CA from /cacerts: ' + res.status);
  const caHash = await sha256(await res.arrayBuffer());
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  let id = '';
  while (id.length < 6) {
    const b = crypto.getRandomValues(new Uint8Array(1))[0];
    if (b < 252) id += alphabet[b % 36]; // 252 = 7*36: no bias
  }
  const secret = hex(crypto.getRandomValues(new Uint8Array(16)));
  const secretHash = 'sha256$' + await sha256(new TextEncoder().encode(secret));
  return { id, secretHash, token: 'K10' + caHash + '::' + id + '.' + secret };
}

function tokenBody(name, secretHash, f) {
  const spec = { secretHash, cluster: f.cluster || undefined, manualApproval: f.manual || undefined, description: f.description || undefined };
  if (f.maxUses) spec.maxUses = f.maxUses;
  if (f.ttl && f.ttl !== '0') spec.ttl = f.ttl;
  return JSON.stringify({ apiVersion: 'muster.io/v1alpha1', kind: 'ClusterRegistrationToken', metadata: { name }, spec });
}

const jsonOpts = (method, body, type) => ({ method, headers: { 'Content-Type': type || 'application/json' }, body });

function tokensPage(view) {
  const note = el('p', { class: 'muted', id: 'tok-note' });
  const secretValue = el('code', { id: 'token-secret-value' });
  const secretBox = el('div', { class: 'secret', id: 'token-secret', hidden: '' },
    el('p', { text: 'The new join token, shown this once (the server keeps only its hash). Give it to the machines that join: muster-agent --token …' }),
    secretValue, ' ',
    el('button', { type: 'button', id: 'token-secret-dismiss', text: 'Dismiss', onclick: () => { secretValue.textContent = ''; secretBox.hidden = true; } }));
  const clusters = el('datalist', { id: 'tok-clusters' });
  const f = {
    cluster: el('input', { id: 'tok-cluster', list: 'tok-clusters', placeholder: 'empty: a cluster per machine', size: '24' }),
    ttl: el('input', { id: 'tok-ttl', value: '24h', size: '6', title: 'how long the token may be used, e.g. 24h; 0: never expires' }),
    manual: el('input', { id: 'tok-manual', type: 'checkbox' }),
    description: el('input', { id: 'tok-description', placeholder: 'what it is for', size: '28' }),
    maxUses: el('input', { id: 'tok-maxuses', type: 'number', min: '0', value: '0', size: '4', title: '0: no limit' }),
  };
  const form = el('form', { id: 'token-create', class: 'filters', hidden: '' },
    el('label', {}, 'Cluster ', f.cluster), clusters,
    el('label', {}, 'TTL ', f.ttl),
    el('label', {}, f.manual, ' manual approval'),
    el('label', {}, 'Max uses ', f.maxUses),
    el('label', {}, 'Description ', f.description),
    el('button', { type: 'submit', id: 'tok-submit', text: 'Create token' }));
  const box = el('div', { id: 'tokens' });
  view.append(el('h1', { text: 'Join tokens' }), note, secretBox, form, box);

  let mayRevoke = null; // asked of the server once a token is active
  const confirming = new Set();
  let last = new Map();

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = { cluster: f.cluster.value.trim(), ttl: f.ttl.value.trim(), manual: f.manual.checked, description: f.description.value, maxUses: parseInt(f.maxUses.value, 10) || 0 };
    try {
      for (let attempt = 0; ; attempt++) {
        const t = await newJoinToken();
        try {
          await api(API + '/clusterregistrationtokens', jsonOpts('POST', tokenBody(t.id, t.secretHash, v)));
        } catch (e) {
          if (e.status === 409 && attempt < 3) continue; // a random id collided; draw another
          throw e;
        }
        secretValue.textContent = t.token;
        secretBox.hidden = false;
        note.textContent = 'Token ' + t.id + ' created.';
        f.description.value = '';
        return;
      }
    } catch (e) { note.textContent = 'Creating the token: ' + e.message; }
  });

  const revoke = async (name) => {
    if (!confirming.has(name)) { confirming.add(name); render(last); return; }
    confirming.delete(name);
    try {
      await api(API + '/clusterregistrationtokens/' + encodeURIComponent(name) + '/status', jsonOpts('PATCH', JSON.stringify({ status: { phase: 'Revoked', reason: 'RevokedByOperator' } }), 'application/merge-patch+json'));
      note.textContent = 'Token ' + name + ' revoked.';
    } catch (e) { note.textContent = e.message; }
  };

  const render = throttle(async (items) => {
    last = items;
    const all = [...items.values()].sort((a, b) => (a.metadata.creationTimestamp < b.metadata.creationTimestamp ? 1 : -1));
    const active = all.find((t) => (t.status && t.status.phase) === 'Active');
    if (active && mayRevoke === null) {
      mayRevoke = await allowed(API + '/clusterregistrationtokens/' + encodeURIComponent(active.metadata.name) + '/status',
        jsonOpts('PATCH', JSON.stringify({ status: { phase: 'Revoked', reason: 'RevokedByOperator' } }), 'application/merge-patch+json'));
    }
    const t = el('table', {}, el('tr', {}, ...['Token', 'Phase', 'Cluster', 'Approval', 'Expires', 'Uses', 'Last used', 'Description', ''].map((h) => el('th', { text: h }))));
    for (const tok of all) {
      const sp = tok.spec || {};
      const st = tok.status || {};
      const ph = st.phase || 'Active';
      const act = el('td');
      if (mayRevoke && ph === 'Active') {
        const c = confirming.has(tok.metadata.name);
        act.append(el('button', { class: 'revoke' + (c ? ' confirm' : ''), type: 'button', 'data-name': tok.metadata.name, text: c ? 'Confirm revoke' : 'Revoke', onclick: () => revoke(tok.metadata.name) }));
      }
      t.append(el('tr', { class: 'jointoken', 'data-name': tok.metadata.name, 'data-phase': ph },
        el('td', {}, el('code', { text: tok.metadata.name })),
        el('td', { class: 'phase phase-' + ph, text: ph + (st.reason ? ' (' + st.reason + ')' : '') }),
        el('td', { text: sp.cluster || '(own)' }),
        el('td', { text: sp.manualApproval ? 'manual' : 'auto' }),
        el('td', { text: st.expiresAt ? st.expiresAt : 'never' }),
        el('td', { text: String(st.registrations || 0) + (sp.maxUses ? ' of ' + sp.maxUses : '') }),
        el('td', { text: ago(st.lastUsed) }),
        el('td', { class: 'desc', text: sp.description || '' }),
        act));
    }
    box.replaceChildren(all.length ? t : el('p', { class: 'muted', text: 'No join tokens.' }));
    box.dataset.count = String(all.length);
  });

  // The form is shown to who may create: a dry run of a create of a
  // well-formed token that will never exist.
  (async () => {
    const ok = await allowed(API + '/clusterregistrationtokens', jsonOpts('POST', tokenBody('dryrun' + Date.now().toString(36), 'sha256$' + '0'.repeat(64), {})));
    form.hidden = !ok;
    if (!ok) return;
    try {
      // A scoped user's clusters are in the session: they may not list all.
      const names = session && session.scoped ? (session.clusters || []) : ((await api(API + '/clusters?limit=500')).items || []).map((c) => c.metadata.name);
      clusters.replaceChildren(...names.map((n) => el('option', { value: n })));
    } catch (_) { /* the cluster is typed then */ }
  })();
  return watchScoped(API + '/clusterregistrationtokens', {}, render, (e) => {
    note.textContent = e.status === 403 ? 'Join tokens are shown to operators (group muster:operators): ' + e.message : e.message;
  });
}

function condition(s, type) {
  return ((s.status && s.status.conditions) || []).find((c) => c.type === type);
}

function rolloutsPage(view) {
  const note = el('p', { class: 'muted', id: 'rollout-note' });
  const sets = el('div', { id: 'plansets' });
  const pools = el('div', { id: 'pools' });
  view.append(el('h1', { text: 'Rollouts' }), note, el('h2', { text: 'Plan sets' }), sets, el('h2', { text: 'Machine pools' }), pools);

  let mayPause = null; // asked of the server once a set exists
  const setPaused = async (name, paused) => {
    try {
      await api(API + '/machineplansets/' + encodeURIComponent(name), jsonOpts('PATCH', JSON.stringify({ spec: { strategy: { paused } } }), 'application/merge-patch+json'));
      note.textContent = 'Plan set ' + name + (paused ? ' paused.' : ' resumed.');
    } catch (e) { note.textContent = e.message; }
  };

  const drawSets = throttle(async (items) => {
    const all = [...items.values()].sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
    if (all.length && mayPause === null) {
      const s0 = all[0];
      const p0 = !!(s0.spec && s0.spec.strategy && s0.spec.strategy.paused);
      mayPause = await allowed(API + '/machineplansets/' + encodeURIComponent(s0.metadata.name), jsonOpts('PATCH', JSON.stringify({ spec: { strategy: { paused: p0 } } }), 'application/merge-patch+json'));
    }
    const out = [];
    for (const s of all) {
      const st = s.status || {};
      const paused = !!(s.spec && s.spec.strategy && s.spec.strategy.paused);
      const n = (k) => st[k] || 0;
      const pct = n('matched') ? Math.round(100 * n('updated') / n('matched')) : 0;
      const fill = el('div', { class: 'fill' + (n('failed') ? ' failing' : '') });
      fill.style.width = pct + '%'; // the CSSOM, which the CSP allows from script
      const head = el('div', { class: 'set-head' },
        el('strong', { text: s.metadata.name }),
        el('span', { class: 'muted', text: 'revision ' + (st.revision || '—') + (st.currentPartition ? ', partition ' + st.currentPartition : '') }),
        paused ? el('span', { class: 'badge', text: 'paused' }) : null);
      if (mayPause) {
        head.append(paused
          ? el('button', { class: 'resume', type: 'button', 'data-name': s.metadata.name, text: 'Resume', onclick: () => setPaused(s.metadata.name, false) })
          : el('button', { class: 'pause', type: 'button', 'data-name': s.metadata.name, text: 'Pause', onclick: () => setPaused(s.metadata.name, true) }));
      }
      const counts = n('updated') + ' of ' + n('matched') + ' updated, ' + n('ready') + ' ready, ' + n('failed') + ' failed, ' +
        n('unavailable') + ' unavailable' + (n('conflicting') ? ', ' + n('conflicting') + ' conflicting' : '');
      const conds = el('table', { class: 'conditions' });
      for (const type of ['Progressing', 'Paused', 'Complete', 'Conflict']) {
        const c = condition(s, type);
        if (!c) continue;
        conds.append(el('tr', { class: 'condition', 'data-type': type },
          el('td', { text: type }), el('td', { class: 'cond-' + c.status, text: c.status }), el('td', { text: c.reason || '' }), el('td', { text: c.message || '' })));
      }
      out.push(el('div', {
        class: 'planset', 'data-name': s.metadata.name, 'data-matched': String(n('matched')), 'data-updated': String(n('updated')),
        'data-ready': String(n('ready')), 'data-failed': String(n('failed')), 'data-paused': String(paused),
      }, head, el('div', { class: 'counts', text: counts }), el('div', { class: 'bar', title: pct + '% updated' }, fill), conds));
    }
    sets.replaceChildren(...(out.length ? out : [el('p', { class: 'muted', text: 'No plan sets.' })]));
  });

  const drawPools = throttle((items) => {
    const all = [...items.values()].sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
    const t = el('table', {}, el('tr', {}, ...['Pool', 'Cluster', 'Driver', 'Wanted', 'Replicas', 'Ready', 'Updated', 'Revision', 'Message'].map((h) => el('th', { text: h }))));
    for (const p of all) {
      const sp = p.spec || {};
      const st = p.status || {};
      t.append(el('tr', { class: 'pool', 'data-name': p.metadata.name },
        el('td', { text: p.metadata.name }), el('td', { text: sp.cluster || '' }), el('td', { text: (sp.template && sp.template.driver) || '' }),
        el('td', { text: String(sp.replicas || 0) }), el('td', { text: String(st.replicas || 0) }), el('td', { text: String(st.readyReplicas || 0) }),
        el('td', { text: String(st.updatedReplicas || 0) }), el('td', { text: st.revision || '' }), el('td', { text: st.message || '' })));
    }
    pools.replaceChildren(all.length ? t : el('p', { class: 'muted', text: 'No machine pools.' }));
  });

  const s1 = watchScoped(API + '/machineplansets', {}, drawSets, (e) => { note.textContent = e.message; });
  const s2 = watchScoped(API + '/machinepools', {}, drawPools, (e) => { note.textContent = e.message; });
  return () => { s1(); s2(); };
}

// offerProvider shows "Sign in with <provider>" when the server signs
// people in with an identity provider (its name is text, never HTML).
async function offerProvider() {
  try {
    const p = await api('/console/oidc/provider', { noSignin: true });
    $('signin-oidc').textContent = 'Sign in with ' + p.name;
    $('signin-oidc').setAttribute('href', p.start);
    $('signin-oidc-wrap').hidden = false;
  } catch (_) { /* console tokens only */ }
}

async function boot() {
  offerProvider();
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
