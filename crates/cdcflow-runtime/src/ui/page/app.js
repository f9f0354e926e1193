// The page of `cdcflow ui`: the pipeline's graph from /api/pipeline, each node's state
// from /api/status (asked every 2 s, so the page follows a running pipeline), and the
// selected flow's or table's detail from /api/flow and /api/table. Every text from the
// server is set as text, never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 190, NODE_H = 48, COL_GAP = 56, ROW_GAP = 22, PAD = 16;
const POLL_MS = 2000;

let graph = { nodes: [], edges: [], diagnostics: [] };
let graphText = "";
let status = { flows: [], tables: [] };
let selected = null;

function el(tag, attrs, ...children) {
  const ns = ["svg", "g", "rect", "text", "path", "polyline", "circle", "line", "defs", "marker", "title"].includes(tag);
  const node = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

// ---- the graph ---------------------------------------------------------------------

// Columns by the longest path from a node without inputs: data goes left to right.
function layout(nodes, edges) {
  const inputs = new Map(nodes.map(n => [n.id, []]));
  for (const e of edges) if (inputs.has(e.to)) inputs.get(e.to).push(e.from);
  const depth = new Map();
  const visiting = new Set();
  const depthOf = id => {
    if (depth.has(id)) return depth.get(id);
    if (visiting.has(id)) return 0;
    visiting.add(id);
    const d = Math.max(-1, ...(inputs.get(id) || []).map(depthOf)) + 1;
    visiting.delete(id);
    depth.set(id, d);
    return d;
  };
  nodes.forEach(n => depthOf(n.id));
  const columns = [];
  for (const n of nodes) {
    const d = depth.get(n.id);
    (columns[d] = columns[d] || []).push(n);
  }
  const place = new Map();
  columns.forEach((column, c) => column.forEach((n, r) => {
    place.set(n.id, { x: PAD + c * (NODE_W + COL_GAP), y: PAD + r * (NODE_H + ROW_GAP) });
  }));
  const rows = Math.max(1, ...columns.map(c => (c || []).length));
  return { place, width: PAD * 2 + columns.length * (NODE_W + COL_GAP) - COL_GAP, height: PAD * 2 + rows * (NODE_H + ROW_GAP) - ROW_GAP };
}

function nodeName(id) { return id.slice(id.indexOf(":") + 1); }

function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

function renderGraph() {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const { place, width, height } = layout(graph.nodes, graph.edges);
  // Scaled to the pane's width, but never below 70 % of its size (the pane scrolls).
  const w = Math.max(width, 300), h = Math.max(height, 120);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("width", "100%");
  svg.style.maxWidth = `${w}px`;
  svg.style.minWidth = `${Math.round(w * 0.7)}px`;
  svg.append(el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa3b2" }))));
  for (const e of graph.edges) {
    const a = place.get(e.from), b = place.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2, mid = (x1 + x2) / 2;
    svg.append(el("path", { class: "edge", d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, "data-edge": `${e.from}->${e.to}` }));
  }
  for (const n of graph.nodes) {
    const p = place.get(n.id);
    const g = el("g", { class: `node ${n.kind}`, "data-node": n.id, transform: `translate(${p.x},${p.y})`, tabindex: 0 },
      el("title", {}, `${n.label}\n${n.detail}${n.defined_at ? "\n" + n.defined_at : ""}`),
      el("rect", { width: NODE_W, height: NODE_H }),
      el("text", { x: 10, y: 19 }, clip(n.label, 26)),
      el("text", { x: 10, y: 36, class: "detail" }, clip(n.detail, 32)),
      el("text", { x: NODE_W - 10, y: 17, "text-anchor": "end", class: "badge" }, ""));
    g.addEventListener("click", () => select(n.id));
    g.addEventListener("keydown", ev => { if (ev.key === "Enter") select(n.id); });
    svg.append(g);
  }
  renderDiagnostics();
  applyStatus();
}

function renderDiagnostics() {
  const box = document.getElementById("diagnostics");
  box.replaceChildren();
  for (const d of graph.diagnostics) {
    if (d.severity === "note") continue;
    const where = d.file ? `${d.file}:${d.line}:${d.column}` : "pipeline.yaml";
    // The source line under the message, a caret under the column, as validate shows it.
    const snippet = d.source === null || d.source === undefined ? null :
      el("pre", { class: "source-line" }, `${String(d.line).padStart(4)} | ${d.source}\n     | ${" ".repeat(Math.max(0, d.column - 1))}^ ${d.label || ""}`);
    const item = el("div", { class: `diagnostic ${d.severity}`, "data-diagnostic": d.code },
      el("strong", {}, d.severity), " ", el("code", {}, where), " ", d.message, snippet,
      d.help ? el("div", { class: "hint" }, "help: " + d.help) : null);
    if (d.node) item.addEventListener("click", () => select(d.node));
    box.append(item);
  }
}

// The flows whose state a node shows: a flow's own; a table's defining query and the
// flows writing into it.
function flowsOf(id) {
  const name = nodeName(id).toLowerCase();
  if (id.startsWith("flow:")) return status.flows.filter(f => f.flow.toLowerCase() === name);
  if (id.startsWith("table:")) return status.flows.filter(f => f.target.toLowerCase() === name || f.flow.toLowerCase() === name);
  return [];
}

function applyStatus() {
  for (const g of document.querySelectorAll("[data-node]")) {
    const id = g.getAttribute("data-node");
    const flows = flowsOf(id);
    const failed = flows.some(f => f.last_error);
    const problems = graph.diagnostics.filter(d => d.node === id && d.severity !== "note");
    g.classList.toggle("failed", failed);
    g.classList.toggle("selected", id === selected);
    const badge = g.querySelector(".badge");
    badge.classList.remove("error", "warning", "ok");
    if (problems.some(d => d.severity === "error")) { badge.textContent = "✖ " + problems.length; badge.classList.add("error"); }
    else if (failed) { badge.textContent = "failed"; badge.classList.add("error"); }
    else if (problems.length) { badge.textContent = "⚠ " + problems.length; badge.classList.add("warning"); }
    else if (flows.some(f => f.last_event === "flow_completed" || f.last_event === "flow_up_to_date")) { badge.textContent = "✔"; badge.classList.add("ok"); }
    else badge.textContent = "";
  }
  const failed = status.flows.filter(f => f.last_error).length;
  const errors = graph.diagnostics.filter(d => d.severity === "error").length;
  document.getElementById("summary").textContent =
    `${graph.nodes.length} nodes · ${status.flows.length} flows · ${failed} failed · ${errors} error(s) in the files`;
}

// ---- the detail pane ---------------------------------------------------------------

function facts(pairs) {
  const dl = el("dl", { class: "facts" });
  for (const [k, v] of pairs) {
    if (v === null || v === undefined || v === "") continue;
    dl.append(el("dt", {}, k), el("dd", {}, String(v)));
  }
  return dl;
}

function cell(v) {
  if (v === null || v === undefined) return "NULL";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

function grid(rows, columns, keepEmpty) {
  if (!rows.length) return el("p", { class: "hint" }, "none");
  columns = columns || Object.keys(rows[0]);
  // A column no row has a value in says nothing (unless the table's own).
  if (!keepEmpty) columns = columns.filter(c => rows.some(r => r[c] !== null && r[c] !== undefined));
  const table = el("table", { class: "grid" },
    el("thead", {}, el("tr", {}, ...columns.map(c => el("th", {}, c)))),
    el("tbody", {}, ...rows.map(r => el("tr", {}, ...columns.map(c =>
      el("td", { class: typeof r[c] === "number" ? "num" : null }, cell(r[c])))))));
  return el("div", { class: "scroll" }, table);
}

// Lag over time: one point per completed or failed run, oldest left.
function lagChart(runs) {
  const points = runs.filter(r => r.lag_ms !== null || r.event === "flow_failed").slice().reverse();
  const W = 460, H = 150, L = 48, B = 22, T = 10;
  const svg = el("svg", { class: "lag-chart", width: W, height: H, "data-points": points.length });
  if (!points.length) {
    svg.append(el("text", { x: L, y: H / 2 }, "no run with a lag yet"));
    return svg;
  }
  const maxLag = Math.max(1, ...points.map(p => p.lag_ms || 0));
  const x = i => L + (points.length === 1 ? (W - L - 10) / 2 : i * (W - L - 10) / (points.length - 1));
  const y = v => T + (H - T - B) * (1 - v / maxLag);
  const line = points.map((p, i) => `${x(i)},${y(p.lag_ms || 0)}`).join(" ");
  svg.append(el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#ccc" }),
    el("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#ccc" }),
    el("text", { x: 4, y: T + 8 }, seconds(maxLag)),
    el("text", { x: 4, y: H - B }, "0 s"),
    el("text", { x: L, y: H - 6 }, points[0].timestamp.slice(0, 19)),
    el("text", { x: W - 10, y: H - 6, "text-anchor": "end" }, points[points.length - 1].timestamp.slice(0, 19)),
    el("polyline", { points: line }));
  points.forEach((p, i) => svg.append(el("circle", { cx: x(i), cy: y(p.lag_ms || 0), r: 3.5, class: p.event === "flow_failed" ? "failed" : null },
    el("title", {}, `${p.timestamp}: ${p.event}${p.lag_ms !== null ? ", lag " + seconds(p.lag_ms) : ""}`))));
  return svg;
}

function seconds(ms) {
  const s = ms / 1000;
  if (s < 1) return `${ms} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

// The expectations' counts of a run, from its event-log message
// ("expectations: valid_amount (drop): 9 passed, 1 failed; …").
function expectationsOf(message) {
  const m = /expectations: (.*?)(?:; (?:lag per partition|state|applied in slices): |$)/.exec(message || "");
  return m ? m[1] : null;
}

// What the last committed batch counted: expectations, quarantined, late and
// duplicate rows, a stateful flow's state.
function lastBatchFacts(runs) {
  const last = runs.find(r => r.event === "flow_completed");
  if (!last) return el("div");
  return facts([
    ["expectations", expectationsOf(last.message)],
    ["quarantined", last.quarantined], ["late", last.late], ["duplicates", last.duplicates],
    ["state rows", last.state_rows], ["state bytes", last.state_memory_bytes],
    ["dropped by watermark", last.rows_dropped_by_watermark],
  ]);
}

function flowFacts(s) {
  if (!s) return el("p", { class: "hint" }, "not run yet");
  return facts([
    ["last run", s.last_run], ["outcome", s.last_event],
    ["rows read", s.rows_read], ["rows written", s.rows_written],
    ["lag", s.lag_ms === null || s.lag_ms === undefined ? null : seconds(s.lag_ms)],
    ["backlog", s.backlog_files ? `${s.backlog_files} file(s), ${s.backlog_bytes} bytes` : "none"],
    ["late applied", s.late_applied], ["late dropped", s.late_dropped],
    ["state rows", s.state ? s.state.rows : null],
    ["watermark", s.state ? s.state.watermark : null],
  ]);
}

async function showFlow(name, pane) {
  const data = await getJson(`/api/flow?name=${encodeURIComponent(name)}`);
  if (data.error) { pane.append(el("p", { class: "error-text" }, data.error)); return; }
  if (data.status && data.status.last_error) pane.append(el("p", { class: "error-text", "data-flow-error": name }, data.status.last_error));
  pane.append(el("h3", {}, "last run"), flowFacts(data.status));
  pane.append(lastBatchFacts(data.runs));
  pane.append(el("h3", {}, "lag over time"), lagChart(data.runs));
  pane.append(el("h3", {}, "runs"), grid(data.runs.map(r => ({
    time: r.timestamp.slice(0, 19), event: r.event, batch: r.batch, read: r.rows_read, written: r.rows_written,
    lag: r.lag_ms === null ? null : seconds(r.lag_ms), ms: r.duration_ms, late: r.late, quarantined: r.quarantined,
    duplicates: r.duplicates, "state rows": r.state_rows, message: r.message,
  }))));
}

async function showTable(name, pane) {
  const data = await getJson(`/api/table?name=${encodeURIComponent(name)}`);
  if (data.error && !data.table) { pane.append(el("p", { class: "error-text" }, data.error)); return; }
  const t = data.table;
  pane.append(facts([["SCD type", t.scd_type], ["rows", t.rows], ["version", t.version], ["quarantine", t.quarantine]]));
  if (t.error || data.error) {
    pane.append(el("p", { class: "error-text" }, t.error || data.error));
    return;
  }
  for (const f of flowsOf("table:" + name)) {
    pane.append(el("h3", {}, `flow ${f.flow}`));
    if (f.last_error) pane.append(el("p", { class: "error-text" }, f.last_error));
    pane.append(flowFacts(f));
    if (f.flow.toLowerCase() === name.toLowerCase()) {
      const runs = await getJson(`/api/flow?name=${encodeURIComponent(f.flow)}`);
      if (!runs.error) pane.append(lastBatchFacts(runs.runs), lagChart(runs.runs));
    }
  }
  if (!data.created) { pane.append(el("p", { class: "hint" }, "not created yet: `cdcflow run` creates it")); return; }
  pane.append(el("h3", {}, "columns"), grid(data.columns, ["name", "type", "nullable"], true));
  pane.append(el("h3", {}, `rows (first ${data.preview.length})`), grid(data.preview, data.columns.map(c => c.name), true));
  pane.append(el("h3", {}, "history"), grid(data.history, ["version", "timestamp", "operation", "flow", "batch", "rowsWritten", "filesAdded", "filesRemoved"]));
}

async function showDetail() {
  const pane = document.getElementById("detail");
  const node = graph.nodes.find(n => n.id === selected);
  if (!node) return;
  const fresh = el("div", { "data-detail": node.id });
  fresh.append(el("h2", {}, node.label), facts([["kind", node.kind.replace("_", " ")], ["what", node.detail], ["defined at", node.defined_at]]));
  for (const d of graph.diagnostics.filter(d => d.node === node.id && d.severity !== "note")) {
    fresh.append(el("p", { class: d.severity === "error" ? "error-text" : "hint" }, `${d.severity}: ${d.file}:${d.line}:${d.column}: ${d.message}`));
  }
  try {
    if (node.kind === "flow") await showFlow(node.label, fresh);
    else if (node.kind !== "source" && node.kind !== "view") await showTable(node.label, fresh);
  } catch (e) {
    fresh.append(el("p", { class: "error-text" }, String(e)));
  }
  if (selected === node.id) pane.replaceChildren(fresh);
}

function select(id) {
  selected = id;
  if (location.hash !== "#" + id) history.replaceState(null, "", "#" + id);
  applyStatus();
  showDetail();
}

// ---- polling -----------------------------------------------------------------------

async function refresh() {
  const live = document.getElementById("live");
  try {
    const [p, s] = await Promise.all([getJson("/api/pipeline"), getJson("/api/status")]);
    const text = JSON.stringify(p);
    if (text !== graphText) {
      graph = p;
      graphText = text;
      document.getElementById("pipeline-name").textContent = p.pipeline || "(pipeline.yaml unusable)";
      renderGraph();
    }
    if (s.error) {
      // The state cannot be read now: say so, keep the last one drawn.
      live.classList.add("stale");
      live.textContent = "state unreadable: " + s.error;
      return;
    }
    const changed = JSON.stringify(s) !== JSON.stringify(status);
    status = s;
    applyStatus();
    if (changed && selected) showDetail();
    live.classList.remove("stale");
    live.textContent = "live";
  } catch (e) {
    live.classList.add("stale");
    live.textContent = "server unreachable";
  }
}

async function start() {
  await refresh();
  let wanted = location.hash.slice(1);
  try { wanted = decodeURIComponent(wanted); } catch (e) { /* a name with % as written */ }
  if (wanted && graph.nodes.some(n => n.id === wanted)) select(wanted);
  document.body.setAttribute("data-ready", "true");
  setInterval(refresh, POLL_MS);
}

start();
