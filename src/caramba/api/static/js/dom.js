// DOM helpers: build elements from data with textContent only (no HTML strings from data).

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (v === true) node.setAttribute(k, "");
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

export function table(columns, rows, { empty = "nothing yet", cls = "" } = {}) {
  const head = h("tr", {}, columns.map((c) => h("th", {}, c.title)));
  const body = rows.length
    ? rows.map((r) => h("tr", r.__attrs || {}, columns.map((c) => h("td", { class: c.cls || null }, c.cell(r)))))
    : [h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, empty))];
  return h("table", { class: `grid ${cls}`.trim() }, h("thead", {}, head), h("tbody", {}, body));
}

export function badge(status) {
  return h("span", { class: `badge status-${status}`, dataset: { status } }, status);
}

export function when(ts) {
  if (!ts) return "—";
  const d = new Date(typeof ts === "number" ? ts * 1000 : ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleString();
}

// An SVG document from the server (the IR graph), parsed and imported, never run as HTML.
export function svgNode(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const root = doc.documentElement;
  if (root.nodeName !== "svg") return h("p", { class: "error" }, "could not draw the graph");
  return document.importNode(root, true);
}

// Errors with locations (manifest file:line:col, dotted path) as a list; clicking one calls onPick.
export function errorList(err, onPick) {
  const items = (err.errors && err.errors.length ? err.errors : [{ message: err.message }]).map((e) => {
    const where = [e.file, e.line, e.col].filter((x) => x !== undefined && x !== null).join(":");
    const loc = h("span", { class: "loc" }, where || "");
    const path = e.path ? h("code", {}, e.path) : null;
    const li = h("li", { class: "err", dataset: { line: e.line || "", col: e.col || "" } },
      loc, where ? " " : "", path, path ? " " : "", e.message || "", e.hint ? h("div", { class: "hint" }, e.hint) : null);
    if (onPick && e.line) li.addEventListener("click", () => onPick(e));
    return li;
  });
  return h("div", { class: "errors", role: "alert" },
    h("strong", {}, `${err.status ? `${err.status} ` : ""}${err.body && err.body.type ? err.body.type : "error"}`),
    h("ul", {}, items));
}
