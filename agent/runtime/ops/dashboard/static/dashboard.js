// ELF dashboard: one page, no build step. Reads the agent's event feed
// (GET /api/v1/dashboard/events, Server-Sent Events read with fetch so the token travels in
// the Authorization header, never in a URL) and draws agents, job trees, epochs and charts.
// Every value from the network reaches the page through textContent / SVG attributes only.
"use strict";

const TOKEN_KEY = "elf.dashboard.token";
const SVG = "http://www.w3.org/2000/svg";
const state = { agents: new Map(), jobs: new Map(), charts: new Map(), failed: new Set() };

// ---- token -------------------------------------------------------------------------------
function takeFragmentToken() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search); // out of the URL bar
  }
}
const token = () => sessionStorage.getItem(TOKEN_KEY);

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("main").hidden = true;
  document.getElementById("login-error").textContent = message || "";
}

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: { Authorization: "Bearer " + token(), "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  let doc = null;
  try { doc = await resp.json(); } catch (e) { doc = { error: "reply is not JSON" }; }
  if (resp.status === 401) showLogin("the agent refused the token");
  if (!resp.ok) throw new Error((doc && doc.error) || resp.statusText);
  return doc;
}

// ---- the feed ----------------------------------------------------------------------------
function setConn(s, text) {
  const el = document.getElementById("conn");
  el.dataset.state = s;
  el.textContent = text || s;
}

async function stream() {
  let backoff = 1000;
  for (;;) {
    if (!token()) { showLogin(""); return; }
    setConn("connecting");
    try {
      const resp = await fetch("/api/v1/dashboard/events", {
        headers: { Authorization: "Bearer " + token() }, cache: "no-store",
      });
      if (resp.status === 401) { sessionStorage.removeItem(TOKEN_KEY); showLogin("the agent refused the token"); setConn("error", "no token"); return; }
      if (!resp.ok) throw new Error("events: HTTP " + resp.status);
      document.getElementById("login").hidden = true;
      document.getElementById("main").hidden = false;
      setConn("live");
      backoff = 1000;
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          handleFrame(frame);
        }
      }
      setConn("error", "feed ended");
    } catch (e) {
      setConn("error", "disconnected");
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(10000, backoff * 2);
  }
}

function handleFrame(frame) {
  let event = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue; // keep-alive comment
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const doc = JSON.parse(data.join("\n"));
  if (event === "cluster") renderCluster(doc);
  else if (event === "job") renderJob(doc);
  else if (event === "gone") removeJob(doc.name);
}

// ---- helpers -----------------------------------------------------------------------------
const short = (id) => (id ? id.slice(0, 8) : "?");
// Results name lacking origins in hex without leading zeros (the results API's form); node
// ids everywhere else on the page are 40 hex digits: pad, so one agent reads the same in the
// agents table, the tree and an epoch's "lacking" ("?" is an origin a master cannot name).
const origin = (id) => (id === "?" ? id : short(id.padStart(40, "0")));
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
const mb = (b) => (b == null ? "" : (b / 1048576).toFixed(1) + " MB");
const pct = (x) => (x == null ? "" : x.toFixed(1) + " %");
const secs = (s) => (s == null ? "" : s < 120 ? s.toFixed(0) + " s" : (s / 60).toFixed(0) + " min");
const when = (t) => new Date(t * 1000).toLocaleTimeString();
function lagColor(lag, failed) {
  if (failed) return "var(--bad)";
  if (lag == null) return "var(--unknown)";
  if (lag <= 1) return "var(--ok)";
  if (lag <= 3) return "var(--warn)";
  if (lag <= 8) return "var(--late)";
  return "var(--bad)";
}

// ---- cluster -----------------------------------------------------------------------------
function renderCluster(c) {
  const alive = c.agents.filter((a) => a.status === "alive").length;
  document.getElementById("summary").textContent =
    `serving agent ${short(c.serving)} · ${alive} alive of ${c.agents.length} listed` +
    ` (${c.known} known, ${c.asked} asked${c.truncated ? ", capped at " + c.max_agents : ""})` +
    ` · refresh ${c.period_s} s · ${new Date(c.time * 1000).toLocaleTimeString()}`;
  document.getElementById("agents-count").textContent = `${alive} alive / ${c.agents.length}`;
  state.failed = new Set(c.agents.filter((a) => a.status === "failed").map((a) => a.node_id));
  const body = document.querySelector("#agents tbody");
  body.replaceChildren();
  for (const a of c.agents) {
    const roles = Object.entries(a.roles || {})
      .map(([job, r]) => `${job}: ${r.join("+") || "-"}`).join("; ");
    const tr = el("tr", { "data-node": a.node_id, "data-status": a.status },
      el("td", { class: "mono", title: a.node_id }, short(a.node_id) + (a.node_id === c.serving ? " (this)" : "")),
      el("td", { class: "status" }, el("span", { class: "badge", "data-status": a.status }, a.status)),
      el("td", { class: "mono" }, a.overlay || ""),
      el("td", {}, roles || (a.error ? a.error : "")),
      el("td", {}, pct(a.cpu_percent)),
      el("td", {}, mb(a.rss_bytes)),
      el("td", {}, a.rejected == null ? "" : String(a.rejected)),
      el("td", {}, a.loop_lag && a.loop_lag.recent_max_ms != null ? a.loop_lag.recent_max_ms.toFixed(1) + " ms" : ""),
      el("td", {}, secs(a.uptime_s)),
    );
    body.append(tr);
  }
  for (const name of [...state.jobs.keys()]) if (!c.job_names.includes(name)) removeJob(name);
  document.getElementById("no-jobs").hidden = c.job_names.length > 0;
  renderTimeline(c.timeline || [], c.time);
  for (const job of state.jobs.values()) drawTrees(job.card, job.doc); // failed marks
}

function renderTimeline(events, now) {
  const list = document.getElementById("timeline");
  list.replaceChildren(...[...events].reverse().map((e) =>
    el("li", { "data-kind": e.kind }, `${when(e.time)} ${e.kind}: ${e.text}`)));
  const strip = document.getElementById("timeline-strip");
  strip.replaceChildren();
  // from the oldest event kept (at least a minute) up to now
  const width = strip.clientWidth || 800;
  const oldest = Math.min(now - 60, ...events.map((e) => e.time));
  const span = Math.max(60, now - oldest) * 1.05;
  strip.append(svg("line", { x1: 0, x2: width, y1: 18, y2: 18, class: "edge" }));
  const colors = { failure: "#c62828", failover: "#e07020", recovery: "#2e9d4f", tentative: "#d9a400" };
  for (const e of events) {
    const x = width - ((now - e.time) / span) * width;
    if (x < 0) continue;
    const mark = svg("circle", { cx: x, cy: 18, r: 6, fill: colors[e.kind] || "#888", "data-kind": e.kind });
    const tip = svg("title", {});
    tip.textContent = `${when(e.time)} ${e.text}`;
    mark.append(tip);
    strip.append(mark);
  }
}

// ---- jobs --------------------------------------------------------------------------------
function removeJob(name) {
  const job = state.jobs.get(name);
  if (job) job.card.remove();
  state.jobs.delete(name);
  state.charts.delete(name);
}

function jobCard(name) {
  const card = el("div", { class: "job", "data-job": name });
  card.append(
    el("h3", {}, name, " ", el("span", { class: "muted head" })),
    el("div", { class: "grid" },
      el("div", { class: "tree" },
        el("div", { class: "legend" },
          ...[["var(--ok)", "lag ≤ 1"], ["var(--warn)", "2–3"], ["var(--late)", "4–8"],
            ["var(--bad)", "> 8 / failed"], ["var(--unknown)", "unknown"]].map(([c, t]) =>
            el("span", {}, Object.assign(el("i"), { style: "background:" + c }), t)),
          el("span", {}, "thick ring: master · dashed: standby")),
        el("div", { class: "trees" })),
      el("div", {},
        el("div", { class: "chart" }),
        el("table", { class: "epochs" },
          el("thead", {}, el("tr", {}, ...["epoch", "roll-up latency", "state", "coverage", "result version (term)"].map((h) => el("th", {}, h)))),
          el("tbody")))),
    el("div", { class: "membership", hidden: true }),
    el("div", { class: "result" }),
    actions(name),
  );
  document.getElementById("jobs").append(card);
  return card;
}

function actions(name) {
  const reply = el("p", { class: "reply" });
  const query = el("input", { size: 50, placeholder: "new ELF QL text (ql jobs)" });
  const params = el("input", { size: 24, placeholder: '{"k": 10}' });
  const epoch = el("input", { type: "number", step: "0.1", min: "0.1", size: 6 });
  const policy = el("select", { class: "policy" },
    el("option", { value: "" }, "fault tolerance: unchanged"),
    el("option", { value: "passive" }, "passive"),
    el("option", { value: "replicated:2" }, "replicated positions, 2 replicas"),
    el("option", { value: "replicated:3" }, "replicated positions, 3 replicas"),
    el("option", { value: "budget:4" }, "budgeted replicas, 4 positions"));
  const change = el("button", { type: "button" }, "apply change");
  const stop = el("button", { type: "button", class: "stop" }, "stop job");
  const path = "/api/v1/jobs/" + encodeURIComponent(name);
  change.onclick = async () => {
    const body = {};
    if (query.value.trim()) body.query = query.value.trim();
    if (params.value.trim()) {
      try { body.params = JSON.parse(params.value); } catch (e) { say(reply, false, "params: not JSON"); return; }
    }
    if (epoch.value) body.epoch_seconds = Number(epoch.value);
    if (policy.value) body.fault_tolerance = policyValue(policy.value);
    if (!Object.keys(body).length) { say(reply, false, "nothing to change"); return; }
    say(reply, null, "sent; waiting for every agent to apply it ...");
    try {
      const r = await api("POST", path + "/change", body);
      const missing = (r.missing || []).length;
      say(reply, missing === 0, `version ${r.version} applied by ${r.agents_reached} agents in ` +
        `${r.applied_ms} ms` + (missing ? `; ${missing} did not confirm (they catch up from the job table)` : ""));
    } catch (e) { say(reply, false, "refused: " + e.message); }
  };
  stop.onclick = async () => {
    say(reply, null, "stopping ...");
    try {
      const r = await api("DELETE", path);
      say(reply, true, `stopped (version ${r.version}): ${r.agents_reached} agents reached in ${r.multicast_ms} ms`);
    } catch (e) { say(reply, false, "refused: " + e.message); }
  };
  return el("div", { class: "actions" },
    el("label", {}, "filter / query", query), el("label", {}, "parameters (JSON)", params),
    el("label", {}, "epoch seconds", epoch), policy, change, stop, reply);
}

function say(node, ok, text) {
  node.className = "reply" + (ok === true ? " ok" : ok === false ? " err" : "");
  node.textContent = text;
}

function renderJob(doc) {
  let job = state.jobs.get(doc.name);
  if (!job) {
    job = { card: jobCard(doc.name) };
    state.jobs.set(doc.name, job);
  }
  job.doc = doc;
  document.getElementById("no-jobs").hidden = true;
  const agents = Object.keys(doc.versions).length;
  const applied = Object.values(doc.versions).filter((v) => v >= doc.version).length;
  job.card.querySelector(".head").textContent =
    `version ${doc.version} (${doc.applied_everywhere ? "applied by every agent asked" : `applied by ${applied}/${agents}`})` +
    ` · epochs of ${doc.spec.epoch_seconds} s · newest epoch ${doc.newest_epoch ?? "none yet"}` +
    ` · ${doc.records_in} records in`;
  job.card.dataset.newest = doc.newest_epoch ?? "";
  job.card.dataset.version = doc.version;
  drawTrees(job.card, doc);
  drawChart(doc);
  drawEpochs(job.card, doc);
  drawMembership(job.card, doc);
  drawResult(job.card, doc);
}

function drawTrees(card, doc) {
  const holder = card.querySelector(".trees");
  holder.replaceChildren();
  const byTree = new Map();
  for (const n of doc.nodes) {
    if (!byTree.has(n.tree)) byTree.set(n.tree, []);
    byTree.get(n.tree).push(n);
  }
  for (const [tree, nodes] of byTree) holder.append(treeSvg(tree, nodes, doc));
}

function treeSvg(tree, nodes, doc) {
  const ids = new Map(nodes.map((n) => [n.node, n]));
  const kids = new Map();
  const roots = [];
  for (const n of nodes) {
    if (!n.parent || !ids.has(n.parent)) roots.push(n);
    else { if (!kids.has(n.parent)) kids.set(n.parent, []); kids.get(n.parent).push(n); }
  }
  roots.sort((a, b) => Number(b.is_root) - Number(a.is_root));
  const pos = new Map();
  let column = 0, depth = 0;
  // Inner children get their subtrees side by side; more than WRAP leaf children (a wide
  // fan-out: 16 per node in a large overlay) wrap into rows of WRAP under their parent.
  const WRAP = 8;
  const place = (n, d, seen) => {
    if (seen.has(n.node)) return;
    seen.add(n.node);
    depth = Math.max(depth, d);
    const children = (kids.get(n.node) || []).filter((c) => !seen.has(c.node));
    const start = column;
    const inner = children.filter((c) => (kids.get(c.node) || []).length);
    const leaves = children.filter((c) => !(kids.get(c.node) || []).length);
    for (const c of inner) place(c, d + 1, seen);
    if (leaves.length > WRAP) {
      const left = column;
      leaves.forEach((c, i) => {
        seen.add(c.node);
        pos.set(c.node, { x: left + (i % WRAP), y: d + 1 + Math.floor(i / WRAP) });
      });
      column += WRAP;
      depth = Math.max(depth, d + Math.ceil(leaves.length / WRAP));
    } else {
      for (const c of leaves) place(c, d + 1, seen);
    }
    const x = children.length ? (start + column - 1) / 2 : column++;
    pos.set(n.node, { x, y: d });
  };
  const seen = new Set();
  for (const r of roots) place(r, 0, seen);
  const W = 78, H = 62;
  // drawn at its natural size (a wide tree scrolls sideways instead of shrinking to dots)
  const width = Math.max(1, column) * W, height = (depth + 1) * H + 10;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height,
    "data-tree": tree, role: "img" });
  for (const n of nodes) {
    const p = pos.get(n.node), q = n.parent && pos.get(n.parent);
    if (p && q) root.append(svg("line", { class: "edge", x1: q.x * W + W / 2, y1: q.y * H + 24,
      x2: p.x * W + W / 2, y2: p.y * H + 24 }));
  }
  for (const n of nodes) {
    const p = pos.get(n.node);
    if (!p) continue;
    const failed = state.failed.has(n.node);
    const classes = ["node", n.is_root ? "master" : "", n.standby ? "standby" : "",
      n.replica ? "replica" : "", failed ? "failed" : ""];
    const g = svg("g", { class: classes.join(" ").trim(), "data-node": n.node,
      "data-lag": n.lag == null ? "" : n.lag, "data-role": n.is_root ? "master" : (n.children.length ? "inner" : "leaf") });
    const cx = p.x * W + W / 2, cy = p.y * H + 24;
    if (n.replica) { // an active replica of the master's position: a ring around it
      g.append(svg("circle", { cx, cy, r: 15, class: "replica-ring", fill: "none" }));
    }
    g.append(svg("circle", { cx, cy, r: n.is_root ? 13 : 10, fill: lagColor(n.lag, failed) }));
    const label = svg("text", { x: cx, y: cy + 26, "text-anchor": "middle" });
    label.textContent = short(n.node) + (n.is_root ? " M" : n.replica ? " R" : n.standby ? " S" : "");
    g.append(label);
    const tip = svg("title", {});
    tip.textContent = `${n.node}\n${n.is_root ? "master" : n.state}; roles ${n.roles.join(", ") || "-"}` +
      `; epoch lag ${n.lag ?? "unknown"}; last sent ${n.last_sent ?? "-"}` +
      (n.standby ? "; standby of the master" : "") +
      (n.replica ? "; active replica of the master's position" : "") + (failed ? "; FAILED" : "");
    g.append(tip);
    root.append(g);
  }
  return root;
}

function drawChart(doc) {
  const series = doc.series || [];
  const data = [series.map((p) => p[0]), series.map((p) => p[1]), series.map((p) => p[2])];
  let chart = state.charts.get(doc.name);
  const holder = state.jobs.get(doc.name).card.querySelector(".chart");
  if (!chart && typeof uPlot !== "undefined") {
    chart = new uPlot({
      width: Math.max(320, holder.clientWidth || 420), height: 170,
      series: [{}, { label: "records/s", stroke: "#2f6fbf", scale: "rps" },
        { label: "roll-up latency (s)", stroke: "#e07020", scale: "s" }],
      axes: [{}, { scale: "rps", label: "records/s" },
        { scale: "s", side: 1, label: "latency (s)", grid: { show: false } }],
    }, data, holder);
    state.charts.set(doc.name, chart);
  } else if (chart) chart.setData(data);
}

function drawEpochs(card, doc) {
  const rows = [];
  for (const [tree, m] of Object.entries(doc.masters || {})) {
    for (const e of m.epochs) rows.push({ tree, ...e });
  }
  rows.sort((a, b) => b.epoch - a.epoch);
  const body = card.querySelector(".epochs tbody");
  body.replaceChildren(...rows.slice(0, 8).map((e) => el("tr", { "data-epoch": e.epoch },
    el("td", {}, String(e.epoch)), el("td", {}, e.latency_s.toFixed(3) + " s"),
    el("td", { class: epochState(e) === "final" ? "" : epochState(e) }, epochState(e) + (e.lacking.length ? " (lacking " + e.lacking.map(origin).join(", ") + ")" : "")),
    el("td", {}, (100 * e.coverage).toFixed(0) + " %" + (e.accuracy == null ? "" : " · top-k accuracy ≈ " + (100 * e.accuracy).toFixed(0) + " %")),
    el("td", {}, versionTerm(e)))));
}

// final, tentative (waiting for an absent origin) or partial (a retired origin's part is
// missing for good): the result's own "state" where it says it, else read from its flags
const epochState = (e) => e.state || (e.partial ? "partial" : e.tentative ? "tentative" : "final");
const versionTerm = (e) => String(e.version) + (e.term == null ? "" : ` (term ${e.term})`);

// The origins the job's masters count absent (their epochs stay tentative), retired (later
// epochs no longer wait; missed ones partial) or left (a graceful stop): one row each.
function drawMembership(card, doc) {
  const holder = card.querySelector(".membership");
  const m = doc.membership || {};
  const rows = [
    ...(m.absent || []).map((o) => ["absent", o.origin,
      "since " + (o.since == null ? "?" : when(o.since)) + (o.last_epoch == null ? "" : ` · last epoch ${o.last_epoch}`),
      o.retire_at == null ? "until it returns or is retired (elf retire)" : "retired at " + when(o.retire_at), o.why]),
    ...(m.retired || []).map((o) => ["retired", o.origin,
      "at " + (o.at == null ? "?" : when(o.at)) + ` · from epoch ${o.from_epoch ?? "?"}`, "epochs it missed are partial", o.why]),
    ...(m.left || []).map((o) => ["left", o.origin, `from epoch ${o.from_epoch ?? "?"}`, "later epochs final without it", null]),
  ];
  holder.hidden = rows.length === 0;
  holder.replaceChildren();
  if (!rows.length) return;
  holder.append(el("h4", {}, "origins not contributing"), el("table", { class: "origins" },
    el("thead", {}, el("tr", {}, ...["origin", "state", "when", "then", "why"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map(([st, id, at, then, why]) => el("tr", { "data-origin": id, "data-state": st },
      el("td", { class: "mono", title: id }, origin(id)), el("td", { class: st }, st),
      el("td", {}, at), el("td", {}, then), el("td", {}, why || ""))))));
}

function drawResult(card, doc) {
  const holder = card.querySelector(".result");
  holder.replaceChildren();
  const r = doc.result;
  if (!r) return;
  if (r.error) { holder.append(el("p", { class: "muted" }, "result: " + r.error)); return; }
  const st = epochState(r);
  holder.append(el("p", { "data-state": st, class: st === "final" ? "" : st }, `newest result: epoch ${r.epoch}` +
    (st !== "final" ? ` (${st}, coverage ${(100 * r.coverage).toFixed(0)} %` +
      (r.lacking && r.lacking.length ? ", lacking " + r.lacking.map(origin).join(", ") : "") +
      (r.accuracy == null ? "" : `, top-k accuracy ≈ ${(100 * r.accuracy).toFixed(0)} %`) + ")" : " (final)") +
    ` · version ${versionTerm(r)}` +
    ` · ${r.rows_total} rows` + (r.rows_total > r.rows.length ? `, first ${r.rows.length} shown` : "")));
  const est = r.estimates || {};
  if (r.rows.length) holder.append(rowsTable(r.rows, est, { class: "rows", "data-state": st }));
  if (r.sessions) drawSessions(holder, r.epoch, r.sessions, est);
}

function rowsTable(rows, est, attrs, columns) {
  const first = rows[0];
  const cols = columns || (Array.isArray(first) ? ["key", "value"] : Object.keys(first));
  const head = (c) => est[c] ? el("th", { title: est[c].error, "data-estimate": est[c].kind }, c + " ≈") : el("th", {}, c);
  return el("table", attrs,
    el("thead", {}, el("tr", {}, ...cols.map(head))),
    el("tbody", {}, ...rows.map((row) => el("tr", {},
      ...(Array.isArray(row) ? row : cols.map((c) => row[c])).map((v, i) => resultCell(v, est[cols[i]]))))));
}

// A session query's sessions closed with the shown epoch (the rows above are that epoch's
// per-key pieces): window bounds as UTC times, a flagged session's row marked and its flags
// shown in the flags cell; rows null: the master does not hold them, and why.
function drawSessions(holder, epoch, s, est) {
  if (!Array.isArray(s.rows)) {
    holder.append(el("p", { class: "muted sessions" }, `sessions closed with epoch ${epoch}: unknown here (${s.why || "?"})`));
    return;
  }
  const flagged = s.rows.filter((row) => row.flags && row.flags.length).length;
  holder.append(el("p", { class: "sessions" + (flagged ? " tentative" : "") }, `sessions closed with epoch ${epoch}: ${s.rows_total}` +
    (flagged ? ` (${flagged} flagged)` : "") + (s.rows_total > s.rows.length ? `, first ${s.rows.length} shown` : "")));
  if (!s.rows.length) return;
  const when = (t) => typeof t === "number" ? new Date(t * 1000).toISOString().replace("T", " ").replace(/\.000Z$/, "Z") : t;
  const rows = s.rows.map((row) => ({ ...row, window_start: when(row.window_start), window_end: when(row.window_end),
    flags: (row.flags || []).join("; ") }));
  const table = rowsTable(rows, est, { class: "rows sessions" }, s.columns);
  s.rows.forEach((row, i) => { if (row.flags && row.flags.length) table.tBodies[0].rows[i].setAttribute("data-state", "flagged"); });
  holder.append(table);
}

// One result value as a table cell: sketch estimates by kind (percentiles labelled with their
// percentage, a distinct count rounded, top-k as item ×count), other numbers with at most 6
// significant digits, lists of plain values comma-separated (the first 8); the exact value
// (JSON) is the cell's tooltip whenever the text differs from it.
const MAX_LISTED = 8;
function resultCell(v, estimate) {
  const text = formatValue(v, estimate);
  const exact = v === null || v === undefined ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v);
  const attrs = text === exact ? {} : { title: exact };
  if (v === null || v === undefined) attrs.class = "muted";
  return el("td", attrs, text);
}
function formatValue(v, estimate) {
  if (v === null || v === undefined) return "NULL";
  const kind = estimate && estimate.kind;
  if ((kind === "percentiles" || kind === "quantiles") && estimate.ranks) {
    const values = estimate.array ? v : [v];
    if (Array.isArray(values) && values.length === estimate.ranks.length) {
      const parts = values.map((x, i) => "p" + percentage(estimate.ranks[i]) + " " + formatValue(x));
      return listed(parts, " · ");
    }
  }
  if (kind === "distinct" && typeof v === "number") return "≈ " + Math.round(v).toLocaleString("en-US");
  if (kind === "top_k" && Array.isArray(v)) {
    return listed(v.map((p) => Array.isArray(p) && p.length === 2 ? `${formatValue(p[0])} ×${formatValue(p[1])}` : JSON.stringify(p)), ", ");
  }
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
  // a list of plain values (numbers, text: a bundle's products, collect_set) reads as a list
  if (Array.isArray(v) && v.every((x) => x === null || ["number", "string", "boolean"].includes(typeof x))) {
    return listed(v.map((x) => formatValue(x)), ", ");
  }
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}
const percentage = (rank) => String(Number((100 * rank).toPrecision(4)));
const listed = (parts, sep) => parts.slice(0, MAX_LISTED).join(sep) + (parts.length > MAX_LISTED ? `${sep}… (${parts.length})` : "");

// "passive", "replicated:R", "budget:R" or "adaptive:T" (the select's values) as the spec's
// fault_tolerance field
function policyValue(text) {
  const [policy, count] = text.split(":");
  if (!count) return { policy };
  const key = { budget: "replica_budget", adaptive: "latency_target_ms" }[policy] || "replicas";
  return { policy, [key]: Number(count) };
}

// ---- actions outside a job -----------------------------------------------------------------
document.getElementById("query-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const reply = document.getElementById("query-reply");
  const epoch = document.getElementById("q-epoch").value;
  say(reply, null, "submitting ...");
  try {
    const r = await api("POST", "/api/v1/dashboard/query", {
      name: document.getElementById("q-name").value,
      query: document.getElementById("q-text").value,
      epoch_seconds: epoch ? Number(epoch) : null,
      fault_tolerance: policyValue(document.getElementById("q-policy").value),
    });
    say(reply, true, `job ${r.job} ${r.state}: version ${r.version} reached ${r.agents_reached} agents in ${r.multicast_ms} ms`);
  } catch (e) { say(reply, false, "refused: " + e.message); }
});

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const value = document.getElementById("token").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  document.getElementById("token").value = "";
  stream();
});

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});

takeFragmentToken();
if (token()) stream(); else showLogin("");
