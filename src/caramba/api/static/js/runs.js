// The runs page: runs side by side (parameters, final and best metrics) with sorting, filtering
// and selection; the selected runs' curves overlaid (smoothing, log axis, step or wall-time
// axis); tags, notes and deletion. Also the tuner-arms panel of the experiment page.
// Data: GET /compare (caramba.run.compare, what `caramba research compare` prints) and
// GET /compare/curves.

import { ApiError, call, get } from "./api.js";
import { fmt, LineChart } from "./chart.js";
import { badge, errorList, h, table } from "./dom.js";

const MAX_OVERLAY = 24; // the curves endpoint's limit

function failure(err) {
  return err instanceof ApiError ? errorList(err) : h("div", { class: "errors" }, String(err));
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of params) if (v !== null && v !== undefined && v !== "") q.append(k, v);
  return q.toString();
}

// Exponential moving average with bias correction (TensorBoard's smoothing): weight 0 is the raw curve.
export function smooth(values, weight) {
  if (!weight) return values.slice();
  const out = [];
  let s = 0, n = 0;
  for (const v of values) {
    if (v === null || !Number.isFinite(v)) { out.push(v); continue; }
    s = weight * s + (1 - weight) * v;
    n += 1;
    out.push(s / (1 - weight ** n));
  }
  return out;
}

function paramText(v) {
  if (v === null || v === undefined) return "—";
  return typeof v === "number" ? fmt(v) : (typeof v === "object" ? JSON.stringify(v) : String(v));
}

// A column is {key, title, sub?, get(run)}; parameter and metric columns read the run's maps.
function cellValue(r, col) {
  return col.get(r);
}

function compareValues(a, b) {
  const na = a === null || a === undefined, nb = b === null || b === undefined;
  if (na || nb) return na === nb ? 0 : na ? 1 : -1; // blanks last
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

// The tuner's arms of an experiment with their values and the ranking over seeds.
export function armsPanel(name) {
  const box = h("section", { id: "arms", class: "panel" }, h("span", { class: "muted" }, "tuner arms…"));
  get(`/compare?${query([["experiment", name]])}`).then((c) => {
    if (!c.arms.length && c.ranking.every((a) => !a.arm)) {
      box.replaceChildren(h("span", { class: "muted" }, "this experiment has no tuner arms"));
      return;
    }
    const rank = new Map(c.ranking.map((a) => [a.arm, a]));
    const arms = c.arms.length ? c.arms : c.ranking.map((a) => ({ id: a.arm, set: {}, description: "" }));
    const rows = arms.map((a) => ({ ...a, r: rank.get(a.id) }))
      .sort((x, y) => (x.r ? x.r.rank : 1e9) - (y.r ? y.r.rank : 1e9));
    box.replaceChildren(h("h2", {}, "Tuner arms", c.metric ? h("span", { class: "muted" }, ` ranked by ${c.metric} (${c.mode}), mean ± std over seeds`) : ""),
      table([
        { title: "rank", cell: (a) => (a.r && a.r.mean !== null ? String(a.r.rank) : "—") },
        { title: "arm", cell: (a) => h("code", {}, a.id) },
        { title: "sets", cell: (a) => Object.entries(a.set || {}).map(([k, v]) => `${k}=${paramText(v)}`).join(", ") || "—" },
        { title: c.metric || "metric", cell: (a) => (a.r ? a.r.spread : "—") },
        { title: "seeds", cell: (a) => (a.r ? a.r.seeds.join(", ") : "—") || "—" },
        { title: "", cell: (a) => a.description || "" },
      ], rows.map((a) => ({ ...a, __attrs: { dataset: { arm: a.id } } })), { cls: "arms" }),
      h("p", {}, h("a", { href: `#/runs?experiment=${encodeURIComponent(name)}` }, "compare these runs →")));
  }).catch((err) => box.replaceChildren(failure(err)));
  return box;
}

export async function runsView(ctx, rawQuery) {
  const my = ctx.newScope();
  const params = new URLSearchParams(rawQuery || "");
  const state = {
    experiment: params.get("experiment") || "",
    filter: "",
    status: "",
    sort: { key: null, dir: 1 },
    selected: new Set(params.getAll("run")),
    data: null,
    metric: params.get("metric") || "",
    smoothing: 0,
    x: "step",
    log: false, // the y axis of the overlay (its chart's "log" toggle)
  };
  const expSelect = h("select", { id: "runs-experiment" }, h("option", { value: "" }, "recent runs (all experiments)"));
  const filterInput = h("input", { id: "runs-filter", type: "search", placeholder: "filter: id, arm, tag, note, param…", size: 28 });
  const statusSelect = h("select", { id: "runs-status" }, h("option", { value: "" }, "any status"),
    ["finished", "failed", "cancelled", "interrupted", "running"].map((s) => h("option", { value: s }, s)));
  const rankBox = h("div", { id: "runs-ranking" });
  const tableBox = h("div", { id: "runs-table", class: "scroll-x" });
  const actions = h("div", { id: "runs-actions", class: "row" });
  const out = h("div", { id: "runs-message" });
  const chartControls = h("div", { class: "row", id: "overlay-controls" });
  const chartBox = h("section", { id: "overlay", class: "panel" });
  ctx.show(h("h1", {}, "Runs"),
    h("div", { class: "row" }, h("label", {}, "experiment ", expSelect), h("label", {}, filterInput),
      h("label", {}, statusSelect)),
    rankBox, tableBox, actions, out, chartControls, chartBox);

  try {
    const exps = await get("/experiments?limit=200");
    for (const e of exps.items) expSelect.append(h("option", { value: e.name }, `${e.name} (${e.runs})`));
    if (!state.experiment && exps.items.length === 1) state.experiment = exps.items[0].name;
    expSelect.value = state.experiment;
  } catch (err) {
    tableBox.replaceChildren(failure(err));
    return;
  }

  const load = async () => {
    out.replaceChildren();
    try {
      let q;
      if (state.experiment) {
        q = [["experiment", state.experiment]];
      } else {
        const recent = await get("/runs?limit=100");
        if (!recent.items.length) {
          state.data = null;
          tableBox.replaceChildren(h("p", { class: "muted" }, "no runs yet"));
          rankBox.replaceChildren();
          return;
        }
        q = recent.items.map((r) => ["run", r.id]);
      }
      state.data = await get(`/compare?${query(q)}`);
      if (!my.alive) return;
      const known = new Set(state.data.runs.map((r) => r.id));
      for (const id of [...state.selected]) if (!known.has(id)) state.selected.delete(id);
      if (!state.metric || !state.data.metrics.includes(state.metric)) state.metric = state.data.metric || state.data.metrics[0] || "";
      paint();
      overlay();
    } catch (err) {
      tableBox.replaceChildren(failure(err));
    }
  };

  const visible = () => {
    const words = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
    return state.data.runs.filter((r) => {
      if (state.status && r.status !== state.status) return false;
      const text = [r.id, r.label, r.arm, r.status, r.backend, r.note, ...r.tags, `seed${r.seed}`,
        ...Object.entries(r.params).map(([k, v]) => `${k}=${paramText(v)}`)].join(" ").toLowerCase();
      return words.every((w) => text.includes(w));
    });
  };

  const columns = () => {
    const d = state.data;
    const shown = d.metrics.filter((m) => m === "train.loss" || /^(val|test)\./.test(m));
    const metrics = shown.length ? shown : d.metrics.slice(0, 6);
    if (state.metric && !metrics.includes(state.metric)) metrics.unshift(state.metric);
    return [
      { key: "id", title: "run", get: (r) => r.id },
      { key: "arm", title: "arm", get: (r) => r.arm },
      { key: "seed", title: "seed", get: (r) => r.seed },
      { key: "status", title: "status", get: (r) => r.status },
      { key: "tags", title: "tags", get: (r) => r.tags.join(" ") },
      ...d.params.map((p) => ({ key: `p:${p}`, kind: "param", title: p, get: (r) => r.params[p] })),
      ...metrics.flatMap((m) => [
        { key: `f:${m}`, kind: "metric", title: m, sub: "final", get: (r) => r.final[m] },
        { key: `b:${m}`, kind: "metric", title: m, sub: "best", get: (r) => r.best[m] },
      ]),
    ];
  };

  const paint = () => {
    const cols = columns();
    let rows = visible();
    const sortCol = cols.find((c) => c.key === state.sort.key);
    if (sortCol) {
      rows = rows.slice().sort((a, b) => state.sort.dir * compareValues(cellValue(a, sortCol), cellValue(b, sortCol)));
    }
    const all = h("input", { type: "checkbox", title: "select all shown", "aria-label": "select all shown" });
    all.checked = rows.length > 0 && rows.every((r) => state.selected.has(r.id));
    all.addEventListener("change", () => {
      for (const r of rows) {
        if (all.checked) state.selected.add(r.id);
        else state.selected.delete(r.id);
      }
      paint();
      overlay();
    });
    const head = h("tr", {}, h("th", {}, all), cols.map((c) => {
      const on = state.sort.key === c.key;
      const th = h("th", { class: "sortable", dataset: { col: c.key }, title: "sort" },
        c.title, c.sub ? h("span", { class: "muted" }, ` ${c.sub}`) : "", on ? (state.sort.dir > 0 ? " ▲" : " ▼") : "");
      th.addEventListener("click", () => {
        state.sort = { key: c.key, dir: on ? -state.sort.dir : 1 };
        paint();
      });
      return th;
    }));
    const body = rows.length ? rows.map((r) => {
      const box = h("input", { type: "checkbox", "aria-label": `select ${r.id}`, dataset: { run: r.id } });
      box.checked = state.selected.has(r.id);
      box.addEventListener("change", () => {
        if (box.checked) state.selected.add(r.id);
        else state.selected.delete(r.id);
        actionsPaint();
        overlay();
      });
      const cells = cols.map((c) => {
        if (c.key === "id") {
          return h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id),
            r.note ? h("div", { class: "note muted", title: r.note }, r.note.length > 80 ? `${r.note.slice(0, 77)}…` : r.note) : null);
        }
        if (c.key === "status") return h("td", {}, badge(r.status));
        if (c.key === "tags") return h("td", {}, r.tags.map((t) => h("span", { class: "tag" }, t)));
        if (c.kind) {
          const v = cellValue(r, c);
          return h("td", { class: "num" }, c.kind === "param" ? paramText(v) : (v === null || v === undefined ? "—" : fmt(v)));
        }
        return h("td", {}, String(c.get(r) ?? "—") || "—");
      });
      return h("tr", { dataset: { run: r.id, arm: r.arm }, class: state.selected.has(r.id) ? "selected" : null }, h("td", {}, box), cells);
    }) : [h("tr", {}, h("td", { colspan: cols.length + 1, class: "muted" }, "no run matches the filter"))];
    tableBox.replaceChildren(h("table", { class: "grid runs-grid" }, h("thead", {}, head), h("tbody", {}, body)));
    const d = state.data;
    rankBox.replaceChildren(d.ranking.length && d.metric && d.ranking.some((a) => a.arm) ? h("p", { class: "ranking" },
      h("strong", {}, `arms by ${d.metric} (${d.mode}): `),
      d.ranking.map((a, i) => [i ? " · " : "", h("span", { dataset: { arm: a.arm } }, `${a.rank}. ${a.arm || "—"} ${a.spread}`)])) : "");
    actionsPaint();
  };

  const actionsPaint = () => {
    const n = state.selected.size;
    const tag = h("input", { id: "tag-input", placeholder: "tag", size: 12 });
    const note = h("input", { id: "note-input", placeholder: "note for the selected run", size: 32 });
    const ids = [...state.selected];
    if (n === 1) note.value = (state.data.runs.find((r) => r.id === ids[0]) || {}).note || "";
    const act = (fn) => async () => {
      out.replaceChildren(h("span", { class: "muted" }, "working…"));
      try {
        await fn();
        out.replaceChildren(h("div", { class: "ok" }, "done"));
        await load();
      } catch (err) {
        out.replaceChildren(failure(err));
      }
    };
    const enc = encodeURIComponent;
    actions.replaceChildren(h("span", { class: "muted" }, `${n} selected`),
      tag,
      h("button", { type: "button", id: "tag-add", disabled: !n, onclick: act(async () => {
        for (const id of ids) await call("POST", `/runs/${enc(id)}/tags`, { add: [tag.value.trim()] });
      }) }, "Add tag"),
      h("button", { type: "button", id: "tag-remove", disabled: !n, onclick: act(async () => {
        for (const id of ids) await call("POST", `/runs/${enc(id)}/tags`, { remove: [tag.value.trim()] });
      }) }, "Remove tag"),
      note,
      h("button", { type: "button", id: "note-save", disabled: n !== 1, onclick: act(async () => {
        await call("PUT", `/runs/${enc(ids[0])}/note`, { note: note.value });
      }) }, "Save note"),
      h("button", { type: "button", id: "delete-runs", class: "danger", disabled: !n, onclick: act(async () => {
        if (!window.confirm(`Delete ${n} run(s)? The Notary records the deletion; their files and checkpoints are removed.`)) {
          throw new Error("not deleted");
        }
        for (const id of ids) {
          await call("DELETE", `/runs/${enc(id)}?reason=${enc("deleted in the web UI")}`);
          state.selected.delete(id);
        }
      }) }, "Delete"));
  };

  let chart = null;
  let curves = [];
  const drawCurves = () => {
    if (!chart) return;
    for (const c of curves) {
      const xs = state.x === "seconds" ? c.seconds : c.steps;
      const ys = smooth(c.values, state.smoothing);
      chart.set(`${c.label} (${c.run.slice(-4)})`, xs.map((x, i) => [x, ys[i]]).filter(([, y]) => y !== null));
    }
  };
  const overlay = async () => {
    const ids = [...state.selected].slice(0, MAX_OVERLAY);
    if (chart) state.log = chart.log; // the chart's own log toggle, kept across redraws
    chartControlsPaint();
    chartBox.replaceChildren();
    chart = null;
    if (!ids.length || !state.metric) {
      chartBox.append(h("p", { class: "muted" }, "select runs to overlay their curves"));
      return;
    }
    chart = new LineChart(chartBox, { title: `${state.metric} of ${ids.length} run(s)`,
      xLabel: state.x === "seconds" ? "seconds since start" : "step", log: state.log });
    chart.root.id = "overlay-chart";
    try {
      const res = await get(`/compare/curves?${query([["metric", state.metric], ...ids.map((id) => ["run", id])])}`);
      if (!my.alive) return;
      curves = res.curves;
      drawCurves();
    } catch (err) {
      chartBox.append(failure(err));
    }
  };
  const chartControlsPaint = () => {
    if (!state.data) return;
    const metric = h("select", { id: "overlay-metric" }, state.data.metrics.map((m) => h("option", { value: m }, m)));
    metric.value = state.metric;
    metric.addEventListener("change", () => { state.metric = metric.value; overlay(); });
    const sm = h("input", { id: "overlay-smoothing", type: "range", min: 0, max: 0.99, step: 0.01, value: state.smoothing });
    const smOut = h("span", { class: "muted" }, state.smoothing.toFixed(2));
    sm.addEventListener("input", () => {
      state.smoothing = Number(sm.value);
      smOut.textContent = state.smoothing.toFixed(2);
      drawCurves();
    });
    const x = h("select", { id: "overlay-x" }, h("option", { value: "step" }, "step"), h("option", { value: "seconds" }, "wall time"));
    x.value = state.x;
    x.addEventListener("change", () => { state.x = x.value; overlay(); });
    chartControls.replaceChildren(h("strong", {}, "Overlay "), h("label", {}, "metric ", metric),
      h("label", {}, "smoothing ", sm, " ", smOut), h("label", {}, "x ", x),
      state.selected.size > MAX_OVERLAY ? h("span", { class: "muted" }, `the first ${MAX_OVERLAY} selected are drawn`) : "");
  };

  expSelect.addEventListener("change", () => {
    state.experiment = expSelect.value;
    state.selected.clear();
    state.sort = { key: null, dir: 1 };
    load();
  });
  filterInput.addEventListener("input", () => { state.filter = filterInput.value; if (state.data) paint(); });
  statusSelect.addEventListener("change", () => { state.status = statusSelect.value; if (state.data) paint(); });
  await load();
}
