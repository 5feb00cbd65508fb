// The caramba web UI: a hash router over a few views, all data from /api/v1.

import { ApiError, get, getToken, post, setToken, streamGenerate, streamMetrics } from "./api.js";
import { fmt, LineChart } from "./chart.js";
import { badge, errorList, h, svgNode, table, when } from "./dom.js";
import { armsPanel, runsView } from "./runs.js";

const view = document.getElementById("view");
const ACTIVE = new Set(["created", "running", "paused"]);

// Everything a view opened (streams, timers) is closed when the route changes.
let scope = { streams: [], timers: [], alive: true };
function newScope() {
  scope.alive = false;
  for (const s of scope.streams) s.close();
  for (const t of scope.timers) clearInterval(t);
  scope = { streams: [], timers: [], alive: true };
  return scope;
}

function show(...nodes) {
  view.replaceChildren(...nodes);
}

function failure(err) {
  return err instanceof ApiError ? errorList(err) : h("div", { class: "errors" }, String(err));
}

function runLink(r) {
  return h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id);
}

function progress(r) {
  const steps = r.steps || 0;
  const step = r.step || 0;
  const pct = steps ? Math.min(100, Math.round((100 * step) / steps)) : (r.status === "finished" ? 100 : 0);
  const bar = h("span", { class: "bar" }, h("i", {}));
  bar.firstChild.style.width = `${pct}%`;
  return h("span", { class: "progress" }, bar, ` ${step}${steps ? `/${steps}` : ""}`);
}

// The metric to compare runs by: the training loss if there is one.
function lossKey(points) {
  const keys = [...new Set(points.map((p) => `${p.split}/${p.name}`))];
  return keys.find((k) => k === "train/loss") || keys.find((k) => k.endsWith("/loss"))
    || keys.find((k) => /loss/.test(k)) || keys[0];
}

// ---- experiments dashboard ---------------------------------------------------------------

const EXAMPLE_HINT = "name: my-experiment\ntopology:\n  ...";

function submitPanel(onDone) {
  const text = h("textarea", { id: "manifest-text", rows: 14, spellcheck: "false", placeholder: EXAMPLE_HINT });
  const file = h("input", { id: "manifest-file", type: "file", accept: ".yml,.yaml,text/yaml" });
  const name = h("input", { id: "manifest-name", value: "manifest.yml", size: 18 });
  const overrides = h("input", { id: "manifest-overrides", placeholder: "trainer.steps=50 …", size: 28 });
  const executor = h("select", { id: "manifest-executor", title: "local: live curves every log_every steps; "
    + "actors: Experiment actors with evidence to the Notary and model versions (metrics at checkpoints)" },
  h("option", { value: "local" }, "experiment runner"), h("option", { value: "actors" }, "Experiment actors"));
  const out = h("div", { id: "submit-result" });
  file.addEventListener("change", async () => {
    const f = file.files[0];
    if (!f) return;
    text.value = await f.text();
    name.value = f.name;
  });
  const pick = (e) => {
    const lines = text.value.split("\n");
    let start = 0;
    for (let i = 0; i < e.line - 1 && i < lines.length; i++) start += lines[i].length + 1;
    text.focus();
    text.setSelectionRange(start + Math.max(0, (e.col || 1) - 1), start + (lines[e.line - 1] || "").length);
  };
  const body = () => ({
    manifest: text.value,
    name: name.value || "manifest.yml",
    overrides: overrides.value.split(/\s+/).filter(Boolean),
  });
  const submitBody = () => ({ ...body(), executor: executor.value });
  const validate = async () => {
    out.replaceChildren(h("span", { class: "muted" }, "checking…"));
    try {
      const r = await post("/manifests/validate", body());
      const targets = r.summary.targets.map((t) => `${t.name} (${t.runs.length} run${t.runs.length === 1 ? "" : "s"})`);
      out.replaceChildren(h("div", { class: "ok" }, `valid: ${r.summary.name}, ${r.summary.nodes} nodes`,
        targets.length ? `, targets ${targets.join(", ")}` : ""));
    } catch (err) {
      out.replaceChildren(err instanceof ApiError ? errorList(err, pick) : failure(err));
    }
  };
  const submit = async (ev) => {
    ev.preventDefault();
    out.replaceChildren(h("span", { class: "muted" }, "submitting…"));
    try {
      const r = await post("/experiments", submitBody());
      const links = h("span", { id: "submitted-runs" });
      const paint = (runs) => links.replaceChildren(...runs.map((run, i) => [i ? ", " : "", runLink(run)]).flat());
      paint(r.runs);
      out.replaceChildren(h("div", { class: "ok" },
        `submitted ${r.experiment}: ${r.planned.length} run${r.planned.length === 1 ? "" : "s"} (${r.group_id}) `, links));
      // runs are recorded as they start, one after another: follow the submission until all are
      const follow = setInterval(async () => {
        try {
          const page = await get(`/runs?group_id=${encodeURIComponent(r.group_id)}&limit=1000`);
          paint(page.items.slice().reverse());
          if (page.items.length >= r.planned.length) clearInterval(follow);
        } catch {
          clearInterval(follow);
        }
      }, 1000);
      scope.timers.push(follow);
      onDone(r);
    } catch (err) {
      out.replaceChildren(err instanceof ApiError ? errorList(err, pick) : failure(err));
    }
  };
  const form = h("form", { id: "submit-form", onsubmit: submit },
    h("div", { class: "row" }, h("label", {}, "manifest file ", file), h("label", {}, "name ", name),
      h("label", {}, "overrides ", overrides), h("label", {}, "run with ", executor)),
    text,
    h("div", { class: "row" },
      h("button", { type: "button", id: "validate-button", onclick: validate }, "Validate"),
      h("button", { type: "submit", id: "submit-button", class: "primary" }, "Submit run"),
      getToken() ? null : h("span", { class: "muted" }, " submitting needs the server's token (top right)")),
    out);
  return h("details", { class: "panel", open: true }, h("summary", {}, "Submit a manifest"), form);
}

// Overlay one metric of several runs; runs that are still going stream their points in.
class Compare {
  constructor(container, title) {
    this.chart = new LineChart(container, { title });
    this.metric = null;
    this.runs = new Map(); // run id -> {status, stream}
  }

  async add(run) {
    if (this.runs.has(run.id)) {
      const known = this.runs.get(run.id);
      known.run = run;
      return;
    }
    const entry = { run, stream: null };
    this.runs.set(run.id, entry);
    const accept = (points) => {
      if (!this.metric && points.length) this.metric = lossKey(points);
      const mine = points.filter((p) => `${p.split}/${p.name}` === this.metric && p.value !== null)
        .map((p) => [p.step, p.value]);
      if (mine.length) this.chart.append(run.id, mine);
      else this.chart.ensure(run.id);
    };
    const s = streamMetrics(run.id, { onPoints: accept, onEnd: () => {} });
    scope.streams.push(s);
    entry.stream = s;
  }
}

async function experimentsView() {
  const my = newScope();
  const runsBox = h("section", { id: "runs" });
  const expBox = h("section", { id: "experiments" });
  const chartBox = h("section", { id: "compare", class: "panel" });
  let compare = null;
  const refresh = async () => {
    let exps, runs;
    try {
      [exps, runs] = await Promise.all([get("/experiments?limit=50"), get("/runs?limit=20")]);
    } catch (err) {
      runsBox.replaceChildren(failure(err));
      return;
    }
    if (!my.alive) return;
    expBox.replaceChildren(h("h2", {}, "Experiments"), table([
      { title: "experiment", cell: (e) => h("a", { href: `#/experiments/${encodeURIComponent(e.name)}` }, e.name) },
      { title: "runs", cell: (e) => String(e.runs) },
      { title: "status", cell: (e) => Object.entries(e.statuses || {}).map(([s, n]) => [badge(s), ` ${n} `]) },
      { title: "last run", cell: (e) => when(e.updated) },
    ], exps.items, { empty: "no experiments yet: submit a manifest above" }));
    runsBox.replaceChildren(h("h2", {}, "Recent runs"), table([
      { title: "run", cell: runLink },
      { title: "experiment", cell: (r) => r.experiment },
      { title: "target", cell: (r) => [r.target || "—", r.name ? ` / ${r.name}` : ""] },
      { title: "backend", cell: (r) => r.backend || "—" },
      { title: "status", cell: (r) => badge(r.status) },
      { title: "progress", cell: progress },
      { title: "created", cell: (r) => when(r.created) },
    ], runs.items.map((r) => ({ ...r, __attrs: { dataset: { run: r.id, status: r.status } } })),
    { empty: "no runs yet" }));
    if (!compare && runs.items.length) {
      chartBox.replaceChildren();
      compare = new Compare(chartBox, "loss of recent runs");
      compare.chart.root.id = "loss-chart";
    }
    // a few runs only: each live one holds a connection, and browsers allow six per server
    if (compare) for (const r of runs.items.slice(0, 4)) compare.add(r);
  };
  show(h("h1", {}, "Experiments"), submitPanel(() => refresh()), chartBox, runsBox, expBox);
  await refresh();
  my.timers.push(setInterval(refresh, 2000));
}

async function experimentView(name) {
  const my = newScope();
  const box = h("section", {});
  const chartBox = h("section", { class: "panel" });
  show(h("h1", {}, "Experiment ", h("code", {}, name)), armsPanel(name), chartBox, box);
  let compare = null;
  const refresh = async () => {
    try {
      const [exp, runs] = await Promise.all([
        get(`/experiments/${encodeURIComponent(name)}`),
        get(`/runs?experiment=${encodeURIComponent(name)}&limit=200`),
      ]);
      if (!my.alive) return;
      box.replaceChildren(
        h("p", { class: "muted" }, exp.description || ""),
        table([
          { title: "run", cell: runLink },
          { title: "target", cell: (r) => r.target || "—" },
          { title: "seed", cell: (r) => String(r.seed ?? "—") },
          { title: "backend", cell: (r) => r.backend || "—" },
          { title: "status", cell: (r) => badge(r.status) },
          { title: "progress", cell: progress },
          { title: "finished", cell: (r) => when(r.finished) },
        ], runs.items));
      if (!compare && runs.items.length) compare = new Compare(chartBox, "loss by run");
      if (compare) for (const r of runs.items.slice(0, 12)) compare.add(r);
    } catch (err) {
      box.replaceChildren(failure(err));
    }
  };
  await refresh();
  my.timers.push(setInterval(refresh, 3000));
}

// ---- run detail --------------------------------------------------------------------------

function graphPanel(before, after) {
  const pane = h("div", { class: "graph-pane" });
  const tabs = h("div", { class: "tabs" });
  const pick = (which) => {
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.which === which);
    const g = which === "before" ? before : after;
    pane.replaceChildren(g.svg ? svgNode(g.svg) : h("pre", {}, g.text));
  };
  for (const [which, label] of [["before", `before the pipeline (${before.nodes} nodes)`],
    ["after", `after the pipeline (${after.nodes} nodes)`]]) {
    tabs.append(h("button", { type: "button", dataset: { which }, onclick: () => pick(which) }, label));
  }
  const wrap = h("div", { class: "graph" }, tabs, pane);
  pick("after");
  return wrap;
}

function stagesTable(stages) {
  return table([
    { title: "pass", cell: (s) => s.name },
    { title: "", cell: (s) => (s.skipped ? "disabled" : s.changed ? "changed" : "—") },
    { title: "nodes", cell: (s) => `${s.nodes_before} → ${s.nodes_after}` },
    { title: "ms", cell: (s) => s.ms.toFixed(2) },
    { title: "notes", cell: (s) => s.diagnostics.join("; ") },
  ], stages, { cls: "stages" });
}

async function runView(id) {
  const my = newScope();
  const head = h("div", { class: "run-head" });
  const info = h("section", { class: "panel" });
  const charts = h("section", { id: "run-charts", class: "charts" });
  const extra = h("section", {});
  show(h("h1", {}, "Run ", h("code", {}, id)), head, info, charts, extra);
  let run;
  try {
    run = await get(`/runs/${encodeURIComponent(id)}`);
  } catch (err) {
    show(failure(err));
    return;
  }
  let bar = null; // the progress bar: metrics rows move it between status events
  const advance = (step) => {
    if (!run || !bar || !(step > (run.step || 0))) return;
    run = { ...run, step: Math.min(step, run.steps || step) };
    const next = progress(run);
    bar.replaceWith(next);
    bar = next;
  };
  const paint = (r) => {
    run = r;
    const act = (verb) => async () => {
      try {
        paint(await post(`/runs/${encodeURIComponent(id)}/${verb}`));
      } catch (err) {
        head.append(failure(err));
      }
    };
    const running = r.status === "running";
    bar = progress(r);
    head.replaceChildren(badge(r.status), " ", bar, " ",
      h("button", { type: "button", id: "pause-button", disabled: !running, onclick: act("pause") }, "Pause"),
      h("button", { type: "button", id: "resume-button", disabled: r.status !== "paused" && r.status !== "interrupted", onclick: act("resume") },
        "Resume"),
      h("button", { type: "button", id: "cancel-button", disabled: !ACTIVE.has(r.status), onclick: act("cancel") },
        "Cancel"),
      ...(r.error ? [h("pre", { class: "errors" }, r.error)] : []));
    const rows = [["experiment", h("a", { href: `#/experiments/${encodeURIComponent(r.experiment)}` }, r.experiment)],
      ["target", r.target || "—"], ["run", r.name || "—"], ["backend", r.backend || "—"], ["seed", String(r.seed ?? "—")],
      ["summary", Object.entries(r.summary || {}).map(([k, v]) => `${k} ${typeof v === "number" ? fmt(v) : v}`).join(", ") || "—"],
      ["model", r.status === "finished" ? h("span", { class: "export-links" }, exportLinks(r.id || id)) : "—"],
      ["created", when(r.created)], ["started", when(r.started)], ["finished", when(r.finished)]];
    info.replaceChildren(h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
  };
  paint(run);
  const byMetric = new Map();
  const chartFor = (name) => {
    if (!byMetric.has(name)) {
      const c = new LineChart(charts, { title: name });
      c.root.dataset.metric = name;
      if (/loss/.test(name)) c.root.classList.add("loss-chart");
      byMetric.set(name, c);
    }
    return byMetric.get(name);
  };
  const s = streamMetrics(id, {
    onPoints: (points) => {
      // one chart per metric, one line per split (train, val, test)
      const groups = new Map();
      for (const p of points) {
        if (p.value === null) continue;
        const key = `${p.name}\u0000${p.split}`;
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push([p.step, p.value]);
      }
      for (const [key, pts] of groups) {
        const [name, split] = key.split("\u0000");
        chartFor(name).append(split, pts);
      }
      advance(Math.max(...points.filter((p) => p.split === "train").map((p) => p.step)));
    },
    onStatus: (r) => paint(r),
    onEnd: (r) => {
      paint(r);
      charts.dataset.complete = "true";
      loadExtras();
    },
  });
  my.streams.push(s);
  const loadExtras = async () => {
    const parts = [];
    try {
      const arts = await get(`/runs/${encodeURIComponent(id)}/artifacts`);
      parts.push(h("h2", {}, "Artifacts"), table([
        { title: "name", cell: (a) => h("a", { href: a.url, download: "" }, a.name) },
        { title: "bytes", cell: (a) => String(a.size) },
        { title: "sha256", cell: (a) => h("code", {}, (a.sha256 || "").slice(0, 16)) },
      ], arts, { empty: "no artifacts" }));
    } catch (err) {
      parts.push(failure(err));
    }
    if (run.executor === "actors") {
      try {
        const ev = await get(`/runs/${encodeURIComponent(id)}/evidence`);
        parts.push(h("h2", {}, "Evidence ", ev.verdict ? badge(ev.verdict.verdict) : h("span", { class: "muted" }, "(no claim yet)")),
          ev.verdict && !ev.verdict.valid ? h("pre", { class: "errors" }, ev.verdict.explain) : null,
          entriesTable(ev.entries));
      } catch (err) {
        parts.push(failure(err));
      }
    }
    try {
      const g = await get(`/runs/${encodeURIComponent(id)}/graph`);
      parts.push(h("h2", {}, "IR graph"), stagesTable(g.stages), graphPanel(g.before, g.after));
    } catch (err) {
      parts.push(h("h2", {}, "IR graph"), failure(err));
    }
    if (my.alive) extra.replaceChildren(...parts.filter(Boolean));
  };
  loadExtras();
}

// ---- compile ----------------------------------------------------------------------------

async function compileView() {
  newScope();
  const text = h("textarea", { id: "compile-text", rows: 14, spellcheck: "false", placeholder: EXAMPLE_HINT });
  const backend = h("select", { id: "compile-backend" });
  const out = h("section", { id: "compile-result" });
  try {
    for (const b of await get("/backends")) {
      backend.append(h("option", { value: b.name, disabled: !b.available }, `${b.name}${b.available ? "" : " (unavailable)"}`));
    }
  } catch (err) {
    out.replaceChildren(failure(err));
  }
  const run = async (ev) => {
    ev.preventDefault();
    out.replaceChildren(h("span", { class: "muted" }, "compiling…"));
    try {
      const r = await post("/compile", { manifest: text.value, backend: backend.value });
      out.replaceChildren(h("h2", {}, `pipeline for ${r.backend}`), stagesTable(r.stages), graphPanel(r.before, r.after));
    } catch (err) {
      out.replaceChildren(failure(err));
    }
  };
  show(h("h1", {}, "Compile and explain"),
    h("form", { onsubmit: run, class: "panel" }, text,
      h("div", { class: "row" }, h("label", {}, "backend ", backend),
        h("button", { type: "submit", class: "primary" }, "Compile"))),
    out);
}

// ---- assets, backends, models, notary --------------------------------------------------

async function assetsView(id) {
  newScope();
  if (id) {
    try {
      const a = await get(`/assets/${encodeURIComponent(id)}`);
      const ports = (list) => table([
        { title: "port", cell: (p) => p.name }, { title: "type", cell: (p) => p.type || "" },
        { title: "description", cell: (p) => p.description || "" }], list || [], { empty: "none" });
      show(h("p", {}, h("a", { href: "#/assets" }, "← assets")),
        h("h1", {}, h("code", {}, a.id), " ", h("span", { class: "muted" }, a.kind)),
        h("p", {}, a.description || ""),
        h("h2", {}, "Inputs"), ports(a.inputs), h("h2", {}, "Outputs"), ports(a.outputs),
        h("h2", {}, "Config"), table([
          { title: "name", cell: (f) => f.name }, { title: "type", cell: (f) => f.type || "" },
          { title: "default", cell: (f) => h("code", {}, JSON.stringify(f.default)) },
          { title: "description", cell: (f) => f.description || "" }], a.config || [], { empty: "no config" }),
        a.source ? h("details", {}, h("summary", {}, a.path || "source"), h("pre", {}, a.source)) : null);
    } catch (err) {
      show(failure(err));
    }
    return;
  }
  const filter = h("input", { id: "asset-filter", placeholder: "filter…", type: "search" });
  const box = h("div", {});
  let items = [];
  const paint = () => {
    const q = filter.value.trim().toLowerCase();
    const shown = items.filter((a) => !q || a.id.toLowerCase().includes(q) || (a.description || "").toLowerCase().includes(q));
    box.replaceChildren(table([
      { title: "asset", cell: (a) => h("a", { href: `#/assets/${encodeURIComponent(a.id)}` }, a.id) },
      { title: "kind", cell: (a) => a.kind },
      { title: "description", cell: (a) => a.description || "" },
    ], shown, { empty: "no assets match" }));
  };
  filter.addEventListener("input", paint);
  show(h("h1", {}, "Assets"), h("div", { class: "row" }, filter), box);
  try {
    items = (await get("/assets?limit=1000")).items;
    paint();
  } catch (err) {
    box.replaceChildren(failure(err));
  }
}

async function backendsView() {
  newScope();
  try {
    const list = await get("/backends");
    show(h("h1", {}, "Backends"), table([
      { title: "backend", cell: (b) => b.name },
      { title: "available", cell: (b) => badge(b.available ? "available" : "unavailable") },
      { title: "location", cell: (b) => b.location || "—" },
      { title: "versions", cell: (b) => Object.entries(b.versions).map(([k, v]) => `${k} ${v}`).join(", ") },
      { title: "why not / how to get it", cell: (b) => [b.reason || "", b.install_hint ? h("div", { class: "hint" }, b.install_hint) : null] },
      { title: "options", cell: (b) => b.options.map((o) => o.name).join(", ") },
    ], list, { cls: "backends" }));
  } catch (err) {
    show(failure(err));
  }
}

// The trained model of a run, exported by the server (GET /runs/{id}/export; `caramba export` on the CLI).
function exportLinks(runId) {
  const url = (fmt) => `/api/v1/runs/${encodeURIComponent(runId)}/export?format=${fmt}`;
  return [h("a", { href: url("onnx"), download: "" }, "ONNX"), " · ",
    h("a", { href: url("safetensors"), download: "" }, "safetensors")];
}

async function modelsView(name) {
  newScope();
  try {
    if (name) {
      const m = await get(`/models/${encodeURIComponent(name)}`);
      show(h("p", {}, h("a", { href: "#/models" }, "← models")), h("h1", {}, "Model ", h("code", {}, m.name)),
        table([
          { title: "version", cell: (v) => String(v.version) },
          { title: "parent", cell: (v) => (v.parent === null ? "—" : String(v.parent)) },
          { title: "run", cell: (v) => (v.run_id ? runLink({ id: v.run_id }) : "—") },
          { title: "download", cell: (v) => (v.run_id ? exportLinks(v.run_id) : "—") },
          { title: "metrics", cell: (v) => Object.entries(v.metrics || {}).map(([k, x]) => `${k} ${fmt(x)}`).join(", ") },
          { title: "claim", cell: (v) => h("a", { href: `#/notary?entry=${v.claim}` }, h("code", {}, v.claim.slice(0, 12))) },
          { title: "committed", cell: (v) => when(v.time) },
        ], m.versions, { empty: "no versions" }));
      return;
    }
    const page = await get("/models?limit=200");
    show(h("h1", {}, "Models"), table([
      { title: "model", cell: (m) => h("a", { href: `#/models/${encodeURIComponent(m.name)}` }, m.name) },
      { title: "latest", cell: (m) => String(m.latest ?? "—") },
      { title: "versions", cell: (m) => String(m.versions) },
      { title: "updated", cell: (m) => when(m.updated) },
    ], page.items, { empty: "no models yet" }));
  } catch (err) {
    show(failure(err));
  }
}

function entriesTable(list, onPick) {
  return table([
    { title: "#", cell: (e) => String(e.seq) },
    { title: "kind", cell: (e) => e.kind },
    { title: "name", cell: (e) => e.name },
    { title: "subject", cell: (e) => e.subject || "" },
    { title: "actor", cell: (e) => e.actor || "" },
    { title: "hash", cell: (e) => (onPick ? h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); onPick(e); } },
      h("code", {}, e.hash.slice(0, 12))) : h("code", {}, e.hash.slice(0, 12))) },
    { title: "time", cell: (e) => when(e.time) },
  ], list, { empty: "the ledger is empty", cls: "entries" });
}

async function notaryView(query) {
  newScope();
  const out = h("div", {});
  const ref = h("input", { id: "validity-entry", placeholder: "entry hash, prefix or #seq", size: 40 });
  const verdict = h("div", { id: "validity-result" });
  const check = async (ev) => {
    if (ev) ev.preventDefault();
    try {
      const v = await get(`/notary/validity?entry=${encodeURIComponent(ref.value.trim())}`);
      verdict.replaceChildren(badge(v.verdict), " ", v.entry_label, h("pre", {}, v.explain));
    } catch (err) {
      verdict.replaceChildren(failure(err));
    }
  };
  const integrity = h("span", { id: "ledger-integrity" });
  show(h("h1", {}, "Notary"),
    h("p", { class: "muted" }, "The ledger as recorded; verdicts are computed when asked, re-hashing the artifacts."),
    h("form", { class: "row", onsubmit: check }, h("label", {}, "validity of ", ref),
      h("button", { type: "submit" }, "Check"), integrity),
    verdict, out);
  const wanted = new URLSearchParams(query || "").get("entry");
  if (wanted) {
    ref.value = wanted;
    check();
  }
  try {
    const [page, report] = await Promise.all([get("/notary/entries?limit=1000"), get("/notary/verify")]);
    integrity.replaceChildren(badge(report.ok ? "valid" : "invalid"),
      ` ledger: ${report.entries} entries${report.ok ? ", verifies end to end" : `, ${report.problems.length} problem(s)`}`);
    out.replaceChildren(entriesTable(page.items.slice().reverse(), (e) => {
      ref.value = e.hash;
      check();
    }));
  } catch (err) {
    out.replaceChildren(failure(err));
  }
}

// ---- generate ----------------------------------------------------------------------------

async function generateView() {
  const sc = newScope();
  const field = (id, attrs) => h("input", { id, ...attrs });
  const model = field("gen-model", { placeholder: "checkpoint folder under the data roots, or a run ID", size: 48 });
  const prompt = h("textarea", { id: "gen-prompt", rows: 4, cols: 70, placeholder: "prompt" });
  const n = field("gen-n", { type: "number", value: 64, min: 1, max: 1024 });
  const temperature = field("gen-temperature", { type: "number", value: 0, min: 0, step: 0.1 });
  const topP = field("gen-top-p", { type: "number", value: 1, min: 0.01, max: 1, step: 0.01 });
  const seed = field("gen-seed", { type: "number", value: 0, min: 0 });
  const out = h("pre", { id: "gen-out", class: "generated" });
  const status = h("p", { class: "muted", id: "gen-status" });
  const errors = h("div");
  let running = null;
  const stop = h("button", { type: "button", disabled: true, onclick: () => running && running.controller.abort() }, "Stop");
  const go = h("button", { type: "submit", id: "gen-go" }, "Generate");
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      out.textContent = "";
      errors.replaceChildren();
      status.textContent = "loading the model…";
      go.disabled = true;
      stop.disabled = false;
      const body = { model: model.value.trim(), prompt: prompt.value, max_new_tokens: Number(n.value),
        temperature: Number(temperature.value), top_p: Number(topP.value), seed: Number(seed.value) };
      running = streamGenerate(body, (kind, data) => {
        if (!sc.alive) return;
        if (kind === "start") status.textContent = `${data.model}: ${data.prompt_tokens} prompt tokens`;
        if (kind === "token") out.textContent += data.text;
        if (kind === "end") status.textContent = `${data.tokens} tokens (${data.reason})`;
        if (kind === "error") errors.replaceChildren(h("div", { class: "errors" }, data.message));
      });
      sc.streams.push({ close: () => running.controller.abort() });
      try {
        await running.done;
      } catch (err) {
        if (err.name !== "AbortError") errors.replaceChildren(failure(err));
        status.textContent = err.name === "AbortError" ? "stopped" : "";
      } finally {
        go.disabled = false;
        stop.disabled = true;
      }
    },
  },
  h("p", {}, h("label", { for: "gen-model" }, "model "), model),
  h("p", {}, prompt),
  h("p", {}, "new tokens ", n, " temperature ", temperature, " top-p ", topP, " seed ", seed, " ", go, " ", stop));
  show(h("h1", {}, "Generate"),
    h("p", { class: "muted" }, "Try a language model: a Hugging Face folder under the server's data roots, or a run of a "
      + "character-level text experiment. Tokens stream as they come (KV cache on the server's backend)."),
    form, errors, status, out);
}

// ---- router ------------------------------------------------------------------------------

const ROUTES = [
  [/^\/?$/, "experiments", () => experimentsView()],
  [/^\/experiments\/(.+)$/, "experiments", (m) => experimentView(decodeURIComponent(m[1]))],
  [/^\/runs\/(.+)$/, "experiments", (m) => runView(decodeURIComponent(m[1]))],
  [/^\/compile$/, "compile", () => compileView()],
  [/^\/assets(?:\/(.+))?$/, "assets", (m) => assetsView(m[1] && decodeURIComponent(m[1]))],
  [/^\/backends$/, "backends", () => backendsView()],
  [/^\/models(?:\/(.+))?$/, "models", (m) => modelsView(m[1] && decodeURIComponent(m[1]))],
  [/^\/notary(?:\?(.*))?$/, "notary", (m) => notaryView(m[1])],
  [/^\/generate$/, "generate", () => generateView()],
];
ROUTES.unshift([/^\/runs(?:\?(.*))?$/, "runs", (m) => runsView({ newScope, show }, m[1])]); // the runs table (compare)

function route() {
  let hash = location.hash.replace(/^#/, "");
  if (hash.startsWith("token=")) {
    // `caramba serve` prints a link with the token in the fragment (never sent to the server).
    setToken(decodeURIComponent(hash.slice(6)));
    history.replaceState(null, "", "#/");
    hash = "/";
    paintToken();
  }
  for (const [re, nav, fn] of ROUTES) {
    const m = hash.match(re);
    if (m) {
      for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("on", a.dataset.nav === nav);
      fn(m).catch((err) => show(failure(err)));
      return;
    }
  }
  newScope();
  show(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "back to experiments")));
}

function paintToken() {
  const input = document.getElementById("token-input");
  const state = document.getElementById("token-state");
  input.value = getToken();
  state.textContent = getToken() ? "set" : "not set";
}

document.getElementById("token-form").addEventListener("submit", (ev) => ev.preventDefault());
document.getElementById("token-input").addEventListener("change", (ev) => {
  setToken(ev.target.value.trim());
  paintToken();
});
window.addEventListener("hashchange", route);
paintToken();
get("/health").then((hl) => {
  document.getElementById("footer").textContent = `caramba ${hl.version}` + (hl.auth ? "" : " · no api token configured: read-only");
}).catch(() => {});
route();
