// txd dashboard: a live table of jobs from /api/events (Server-Sent Events), a job page from
// /api/job, a log view from /api/logs. No framework, no build step.
"use strict";

// The token comes in the printed URL's fragment (#token=...), which no request carries, and
// stays in this tab's sessionStorage, which is per origin (port included, unlike a cookie, which
// 127.0.0.1 would send to every server on it). It goes only in the Authorization header of the
// dashboard's own requests.
const TOKEN_KEY = "txd-dashboard-token";
const token = (() => {
  const m = location.hash.match(/^#token=([A-Za-z0-9_-]+)$/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, m[1]);
    history.replaceState(null, "", location.pathname); // off the address bar
  }
  return sessionStorage.getItem(TOKEN_KEY);
})();
const authorized = (init = {}) => ({ ...init, headers: { ...init.headers, Authorization: `Bearer ${token}` } });
const NO_TOKEN = "this tab has no valid token: open the URL txctl dashboard printed";
const RETRY_MS = 2000; // between tries to reach the dashboard again

const STATES = ["SUBMITTED", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "UNKNOWN"];
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const LOG_LIMIT = 2_000_000; // characters kept in the log view; the oldest go first
const $ = (id) => document.getElementById(id);
const jobs = new Map(); // handle -> row (as the server's _feed.row)
const trs = new Map(); // handle -> its <tr>, for the rows shown
const schedulers = new Set();
const filters = { scheduler: "", state: "", text: "" };
let current = null; // the handle of the job page shown, or null
let logAbort = null; // ends the log stream shown
let describing = null; // a Describe in flight: later changes ask again once it ends
let describeAgain = false;

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const jobLink = (handle) => "#/job/" + encodeURIComponent(handle);

function age(ms) {
  if (!ms) return "";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function replicasHtml(replicas) {
  return STATES.filter((s) => replicas[s])
    .map((s) => `<span class="rep s-${s}"><b>${replicas[s]}</b> ${s.toLowerCase()}</span>`)
    .join("");
}

function cells(r) {
  return `<td class="handle"><a href="${esc(jobLink(r.handle))}" title="${esc(r.handle)}">${esc(r.handle)}</a></td>`
    + `<td title="${esc(r.name)}">${esc(r.name)}</td><td>${esc(r.scheduler)}</td>`
    + `<td><span class="state s-${esc(r.state)}" title="${esc(r.msg)}">${esc(r.state)}</span></td>`
    + `<td class="age">${age(r.created)}</td><td>${replicasHtml(r.replicas)}</td>`;
}

function rowHtml(r) {
  return `<tr data-handle="${esc(r.handle)}" data-state="${esc(r.state)}" data-committed="${r.committed}">${cells(r)}</tr>`;
}

function matches(r) {
  if (filters.scheduler && r.scheduler !== filters.scheduler) return false;
  if (filters.state && r.state !== filters.state) return false;
  if (filters.text) {
    const t = filters.text;
    return r.handle.toLowerCase().includes(t) || r.name.toLowerCase().includes(t);
  }
  return true;
}

const newestFirst = (a, b) => b.created - a.created || (a.handle < b.handle ? -1 : 1);

// The table is windowed: `shown` holds every row that passes the filters, newest first, and
// the DOM only the rows in and near the viewport, between two spacer rows that stand for the
// rest. A snapshot of 10,000 jobs is one sort and a few dozen <tr>; a change re-renders at most
// that window, so neither depends on how many jobs the store holds.
let shown = [];
let rowHeight = 0; // measured on the first rows rendered
const OVERSCAN = 20; // rows rendered beyond each edge of the viewport
let windowStart = 0;
let windowEnd = 0;

function count() {
  $("count").textContent = `${shown.length} of ${jobs.size} jobs`;
  $("empty").hidden = shown.length > 0;
}

function addScheduler(name) {
  if (!name || schedulers.has(name)) return;
  schedulers.add(name);
  const sel = $("f-scheduler");
  const opt = new Option(name, name);
  const after = [...sel.options].slice(1).find((o) => o.value > name);
  sel.add(opt, after || null);
}

function visibleRange() {
  const tbody = $("rows");
  const h = rowHeight || 32;
  const top = tbody.getBoundingClientRect().top; // the viewport's offset from the first row
  const first = Math.max(0, Math.floor(-top / h) - OVERSCAN);
  const last = Math.min(shown.length, Math.ceil((window.innerHeight - top) / h) + OVERSCAN);
  return [first, Math.max(first, last)];
}

function spacer(rows) {
  const tr = document.createElement("tr");
  tr.className = "spacer";
  const td = document.createElement("td");
  td.colSpan = 6;
  tr.append(td);
  tr.style.height = `${rows * (rowHeight || 32)}px`;
  if (!rows) tr.hidden = true;
  return tr;
}

// The rows of the window, in one innerHTML of one string.
function renderWindow() {
  const tbody = $("rows");
  [windowStart, windowEnd] = visibleRange();
  tbody.innerHTML = shown.slice(windowStart, windowEnd).map(rowHtml).join("");
  trs.clear();
  for (const tr of tbody.rows) trs.set(tr.dataset.handle, tr);
  if (!rowHeight && tbody.rows.length) {
    rowHeight = tbody.rows[0].getBoundingClientRect().height;
    [windowStart, windowEnd] = visibleRange(); // measured: the window may be another
    tbody.innerHTML = shown.slice(windowStart, windowEnd).map(rowHtml).join("");
    trs.clear();
    for (const tr of tbody.rows) trs.set(tr.dataset.handle, tr);
  }
  tbody.prepend(spacer(windowStart));
  tbody.append(spacer(shown.length - windowEnd));
}

function renderAll() {
  shown = [...jobs.values()].filter(matches).sort(newestFirst);
  for (const r of jobs.values()) addScheduler(r.scheduler);
  renderWindow();
  count();
}

let scrollPending = false;
function onScroll() {
  if (scrollPending || $("jobs-view").hidden) return;
  scrollPending = true;
  requestAnimationFrame(() => {
    scrollPending = false;
    const [first, last] = visibleRange();
    if (first !== windowStart || last !== windowEnd) renderWindow();
  });
}

function stamp(tr) {
  // When the change reaches the screen: the frame after the DOM change (read by the bench).
  delete tr.dataset.shown;
  requestAnimationFrame(() => { tr.dataset.shown = String(Date.now()); });
}

// Where a row goes in `shown` (binary search on the sort order).
function position(r) {
  let lo = 0;
  let hi = shown.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (newestFirst(shown[mid], r) < 0) lo = mid + 1; else hi = mid;
  }
  return lo;
}

function changed(r) {
  const old = jobs.get(r.handle);
  jobs.set(r.handle, r);
  addScheduler(r.scheduler);
  const at = old && matches(old) ? position(old) : -1;
  const tr = trs.get(r.handle);
  if (matches(r) && at >= 0 && shown[at].handle === r.handle) {
    shown[at] = r; // in place: the sort key (created, handle) does not change
    if (tr) {
      tr.innerHTML = cells(r);
      tr.dataset.state = r.state;
      tr.dataset.committed = String(r.committed);
      stamp(tr);
    }
  } else {
    if (at >= 0 && shown[at].handle === r.handle) shown.splice(at, 1);
    if (matches(r)) shown.splice(position(r), 0, r);
    renderWindow();
    const added = trs.get(r.handle);
    if (added) stamp(added);
  }
  count();
  if (r.handle === current) describe();
}

function deleted(handle) {
  const old = jobs.get(handle);
  jobs.delete(handle);
  if (old && matches(old)) {
    const at = position(old);
    if (shown[at] && shown[at].handle === handle) {
      shown.splice(at, 1);
      renderWindow();
    }
  }
  count();
  if (handle === current) {
    $("job-note").textContent = "This job was deleted.";
    $("cancel").disabled = $("delete").disabled = true;
  }
}

function setConn(state, text) {
  const el = $("conn");
  el.dataset.state = state;
  el.textContent = text;
}

// A Server-Sent Events stream, read with fetch since EventSource cannot send the token header.
// Calls on[event](data) for each message and resolves when the server ends the stream; throws
// the fetch's error (aborted, unreachable) or, on a refusal, an Error with its HTTP status.
async function stream(url, on, signal) {
  const resp = await fetch(url, authorized({ signal }));
  if (!resp.ok) throw Object.assign(new Error(`${resp.status} ${resp.statusText}`), { status: resp.status });
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let from = 0; // buf before this holds no message's end: a large snapshot is scanned once
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n", from)) >= 0) {
      let event = "message";
      let data = "";
      for (const line of buf.slice(0, end).split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      buf = buf.slice(end + 2);
      from = 0;
      if (data && on[event]) on[event](JSON.parse(data));
    }
    from = Math.max(0, buf.length - 1);
  }
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Follows /api/events for as long as the page is open, connecting again (from a new snapshot)
// when the stream ends, as EventSource would; a refused token ends it.
async function connect() {
  const on = {
    snapshot: (data) => {
      jobs.clear();
      for (const r of data.rows) jobs.set(r.handle, r);
      renderAll();
      if (data.error) setConn("error", data.error); else setConn("live", "live");
      requestAnimationFrame(() => {
        performance.mark("txd-table");
        document.body.dataset.ready = "1";
      });
    },
    changed,
    deleted: (data) => deleted(data.handle),
    failed: (data) => setConn("error", data.error),
  };
  while (token) { // ends on a refusal, or with the page
    try {
      await stream("/api/events", on); // ended by the dashboard: stopping, or this tab lagged
    } catch (err) {
      if (err.status === 403) break;
    }
    setConn("connecting", "reconnecting…");
    await pause(RETRY_MS);
  }
  setConn("error", NO_TOKEN);
}

function applyFilters() {
  filters.scheduler = $("f-scheduler").value;
  filters.state = $("f-state").value;
  filters.text = $("f-text").value.trim().toLowerCase();
  renderAll();
}

// -- the job page ---------------------------------------------------------------------------

function fact(name, value) {
  return value ? `<dt>${esc(name)}</dt><dd>${esc(value)}</dd>` : "";
}

function showJob(data) {
  const st = data.status;
  const state = st.state;
  $("job-state").className = `state s-${state}`;
  $("job-state").textContent = state;
  $("cancel").disabled = TERMINAL.has(state);
  $("delete").disabled = false;
  $("job-note").textContent = st.stale_msg ? "Status may be out of date: " + st.stale_msg : "";
  $("job-facts").innerHTML = fact("name", st.name) + fact("scheduler", st.scheduler)
    + fact("app id", st.app_id) + fact("created", st.created && new Date(st.created).toLocaleString())
    + fact("updated", st.updated && new Date(st.updated).toLocaleString())
    + fact("message", st.msg) + fact("restarts", st.num_restarts ? String(st.num_restarts) : "")
    + fact("error", st.structured_error_msg) + fact("ui", st.ui_url);
  const rows = [];
  for (const role of st.roles) {
    for (const rep of role.replicas) {
      rows.push(`<tr><td>${esc(role.role)}</td><td>${rep.id}</td>`
        + `<td><span class="state s-${esc(rep.state)}">${esc(rep.state)}</span></td>`
        + `<td>${esc(rep.hostname)}</td><td>${rep.exit_code ?? ""}</td></tr>`);
    }
  }
  $("replicas").tBodies[0].innerHTML = rows.join("");
  $("job-app").textContent = JSON.stringify(data.app, null, 2);
  $("job-cfg").textContent = JSON.stringify(data.cfg, null, 2);
  const native = data.native || {};
  $("job-native").textContent = native.recorded ? native.text : (native.missing || "none recorded");
  const sel = $("log-replica");
  if (sel.options.length === 0) {
    sel.add(new Option("all replicas", ""));
    for (const role of st.roles) {
      for (const rep of role.replicas) {
        sel.add(new Option(`${role.role} #${rep.id}`, `${role.role}/${rep.id}`));
      }
    }
    followLogs();
  }
}

async function describe() {
  if (describing) { describeAgain = true; return; }
  const handle = current;
  describing = fetch("/api/job?handle=" + encodeURIComponent(handle), authorized());
  try {
    const resp = await describing;
    const data = await resp.json();
    if (handle !== current) return;
    if (!resp.ok) { $("job-note").textContent = data.error; return; }
    showJob(data);
  } catch (err) {
    $("job-note").textContent = String(err);
  } finally {
    describing = null;
    if (describeAgain && current) { describeAgain = false; describe(); }
  }
}

function stopLogs() {
  if (logAbort) { logAbort.abort(); logAbort = null; }
}

function followLogs() {
  stopLogs();
  const pre = $("log");
  pre.textContent = "";
  const q = new URLSearchParams({ handle: current });
  const pick = $("log-replica").value;
  if (pick) {
    const cut = pick.lastIndexOf("/");
    q.set("role", pick.slice(0, cut));
    q.set("replica", pick.slice(cut + 1));
  }
  const abort = new AbortController();
  logAbort = abort;
  const status = $("log-status");
  status.textContent = "following…";
  const many = !pick && $("log-replica").options.length > 2;
  const partial = new Map(); // replica -> its line so far (prefixed view of many replicas)
  let ended = false; // the server said why the stream ends
  const log = (d) => {
    let text = d.text;
    if (many) { // whole lines, each prefixed with its replica
      const key = `${d.role}/${d.replica}`;
      const lines = ((partial.get(key) || "") + text).split("\n");
      partial.set(key, lines.pop());
      text = lines.map((l) => `${d.role}#${d.replica}| ${l}\n`).join("");
    }
    if (!text) return;
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(text);
    if (pre.textContent.length > LOG_LIMIT) pre.textContent = pre.textContent.slice(-LOG_LIMIT / 2);
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
  const end = () => { ended = true; status.textContent = "the job ended: all of its log is shown"; };
  const failed = (d) => { ended = true; status.textContent = d.error; };
  stream("/api/logs?" + q, { log, end, failed }, abort.signal)
    .catch((err) => { if (err.status === 403) { ended = true; status.textContent = NO_TOKEN; } })
    .finally(() => {
      if (abort.signal.aborted) return; // another replica picked, or another page
      if (!ended) status.textContent = "the log stream was lost: pick the replica again";
      if (logAbort === abort) logAbort = null;
    });
}

// Asks before a change, with buttons that say what they do (window.confirm's "Cancel" would
// keep the job). Resolves true when the change is confirmed; Escape keeps things as they are.
function ask(question, yes, no) {
  const dialog = $("ask");
  $("ask-text").textContent = question;
  $("ask-yes").textContent = yes;
  $("ask-no").textContent = no;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
  });
}

async function change(what) {
  const handle = current;
  const yes = what === "cancel"
    ? await ask(`Cancel ${handle}? Its replicas are stopped.`, "Cancel job", "Keep running")
    : await ask(`Delete ${handle}? The daemon forgets it, with its logs.`, "Delete job", "Keep job");
  if (!yes) return;
  const resp = await fetch("/api/" + what, authorized({
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ handle }),
  }));
  const data = await resp.json().catch(() => ({ error: `${resp.status} ${resp.statusText}` }));
  if (!resp.ok) { $("job-note").textContent = `${what} failed: ${data.error}`; return; }
  if (what === "delete") location.hash = "#/";
}

// -- routing --------------------------------------------------------------------------------

function route() {
  const m = location.hash.match(/^#\/job\/(.+)$/);
  stopLogs();
  if (m) {
    current = decodeURIComponent(m[1]);
    $("jobs-view").hidden = true;
    $("job-view").hidden = false;
    $("job-title").textContent = current;
    $("log-replica").innerHTML = "";
    for (const id of ["job-facts", "job-app", "job-cfg", "job-native", "log", "job-note", "log-status"]) $(id).textContent = "";
    $("replicas").tBodies[0].innerHTML = "";
    describe();
  } else {
    current = null;
    $("job-view").hidden = true;
    $("jobs-view").hidden = false;
    onScroll(); // the window for where the page is scrolled now
  }
}

function init() {
  const stateSel = $("f-state");
  for (const s of STATES) stateSel.add(new Option(s.toLowerCase(), s));
  $("f-scheduler").addEventListener("change", applyFilters);
  $("f-state").addEventListener("change", applyFilters);
  $("f-text").addEventListener("input", applyFilters);
  $("cancel").addEventListener("click", () => change("cancel"));
  $("delete").addEventListener("click", () => change("delete"));
  $("log-replica").addEventListener("change", followLogs);
  $("ask-yes").addEventListener("click", () => $("ask").close("yes"));
  $("ask-no").addEventListener("click", () => $("ask").close("no"));
  window.addEventListener("hashchange", route);
  window.addEventListener("scroll", onScroll, { passive: true });
  window.addEventListener("resize", onScroll);
  setInterval(() => {
    for (const [handle, tr] of trs) tr.cells[4].textContent = age(jobs.get(handle).created);
  }, 10_000);
  route();
  connect();
}

init();
