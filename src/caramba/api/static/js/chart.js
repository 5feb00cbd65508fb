// A small SVG line chart: several series, nice axis ticks, optional log y axis, a legend and
// a hover readout. Points are appended as they stream in; drawing is batched per frame.

const SVG = "http://www.w3.org/2000/svg";
export const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d",
  "#4d7c0f", "#7c3aed", "#b45309"];

function el(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// Heckbert's nice numbers: about `count` ticks at 1, 2 or 5 times a power of ten.
export function niceTicks(lo, hi, count = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (lo === hi) {
    const d = Math.abs(lo) * 0.1 || 1;
    lo -= d;
    hi += d;
  }
  const nice = (x, round) => {
    const e = Math.floor(Math.log10(x));
    const f = x / 10 ** e;
    let n;
    if (round) n = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else n = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return n * 10 ** e;
  };
  const step = nice(nice(hi - lo, false) / Math.max(1, count - 1), true);
  // from the last tick at or below lo to the first at or above hi, so the data stays inside
  const first = Math.floor(lo / step), last = Math.ceil(hi / step);
  const out = [];
  for (let k = first; k <= last; k++) out.push(Number((k * step).toPrecision(12)));
  return out;
}

export function fmt(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return Number(v.toPrecision(4)).toString();
}

export class LineChart {
  constructor(container, { title = "", xLabel = "step", height = 260, log = false } = {}) {
    this.container = container;
    this.title = title;
    this.xLabel = xLabel;
    this.height = height;
    this.log = log;
    this.series = new Map(); // name -> {points: [[x, y]], color}
    this.pending = false;
    this.root = document.createElement("figure");
    this.root.className = "chart";
    this.root.dataset.title = title;
    const head = document.createElement("figcaption");
    head.textContent = title;
    const toggle = document.createElement("label");
    toggle.className = "log-toggle";
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = log;
    box.addEventListener("change", () => {
      this.log = box.checked;
      this.draw();
    });
    toggle.append(box, " log");
    head.append(toggle);
    this.svg = el("svg", { class: "chart-svg", role: "img", "aria-label": title });
    this.legend = document.createElement("div");
    this.legend.className = "legend";
    this.readout = document.createElement("div");
    this.readout.className = "readout muted";
    this.root.append(head, this.svg, this.legend, this.readout);
    container.append(this.root);
    this.svg.addEventListener("mousemove", (ev) => this.hover(ev));
    this.svg.addEventListener("mouseleave", () => {
      this.readout.textContent = "";
      this.draw();
    });
  }

  color(name) {
    const s = this.series.get(name);
    return s ? s.color : PALETTE[this.series.size % PALETTE.length];
  }

  ensure(name, color) {
    if (!this.series.has(name)) {
      this.series.set(name, { points: [], color: color || PALETTE[this.series.size % PALETTE.length] });
    }
    return this.series.get(name);
  }

  // Points are [x, y] pairs; x must grow within a series (out-of-order points are sorted in).
  append(name, points, color) {
    const s = this.ensure(name, color);
    for (const p of points) {
      const last = s.points[s.points.length - 1];
      if (!last || p[0] > last[0]) s.points.push(p);
      else if (p[0] === last[0]) s.points[s.points.length - 1] = p;
      else {
        s.points.push(p);
        s.points.sort((a, b) => a[0] - b[0]);
      }
    }
    this.schedule();
  }

  set(name, points, color) {
    this.ensure(name, color).points = [];
    this.append(name, points, color);
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  count() {
    let n = 0;
    for (const s of this.series.values()) n += s.points.length;
    return n;
  }

  geometry() {
    const width = Math.max(320, this.container.clientWidth || 640);
    const m = { l: 58, r: 14, t: 10, b: 34 };
    return { width, height: this.height, m, w: width - m.l - m.r, h: this.height - m.t - m.b };
  }

  bounds() {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of this.series.values()) {
      for (const [x, y] of s.points) {
        if (!Number.isFinite(y) || (this.log && y <= 0)) continue;
        x0 = Math.min(x0, x); x1 = Math.max(x1, x);
        y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
    }
    return { x0, x1, y0, y1 };
  }

  draw(hoverX = null) {
    const g = this.geometry();
    const svg = this.svg;
    svg.replaceChildren();
    svg.setAttribute("viewBox", `0 0 ${g.width} ${g.height}`);
    svg.setAttribute("width", g.width);
    svg.setAttribute("height", g.height);
    const b = this.bounds();
    this.root.dataset.points = String(this.count());
    if (!Number.isFinite(b.x0)) {
      svg.append(el("text", { x: g.width / 2, y: g.height / 2, "text-anchor": "middle", class: "empty" },
        "waiting for data…"));
      this.legendDraw();
      return;
    }
    const ty = (v) => (this.log ? Math.log10(v) : v);
    const xt = niceTicks(b.x0, b.x1 === b.x0 ? b.x0 + 1 : b.x1, 6);
    let yt;
    if (this.log) {
      const lo = Math.floor(Math.log10(b.y0)), hi = Math.ceil(Math.log10(b.y1));
      yt = [];
      for (let e = lo; e <= Math.max(hi, lo + 1); e++) yt.push(e);
    } else {
      yt = niceTicks(b.y0, b.y1, 5);
    }
    const xa = xt[0], xb = xt[xt.length - 1];
    const ya = yt[0], yb = yt[yt.length - 1];
    const sx = (x) => g.m.l + ((x - xa) / (xb - xa || 1)) * g.w;
    const sy = (y) => g.m.t + g.h - ((ty(y) - ya) / (yb - ya || 1)) * g.h;
    this.scale = { sx, sy, xa, xb, g };
    const axes = el("g", { class: "axes" });
    for (const t of xt) {
      axes.append(el("line", { x1: sx(t), x2: sx(t), y1: g.m.t, y2: g.m.t + g.h, class: "grid" }));
      axes.append(el("text", { x: sx(t), y: g.m.t + g.h + 16, "text-anchor": "middle" }, fmt(t)));
    }
    for (const t of yt) {
      const y = g.m.t + g.h - ((t - ya) / (yb - ya || 1)) * g.h;
      axes.append(el("line", { x1: g.m.l, x2: g.m.l + g.w, y1: y, y2: y, class: "grid" }));
      axes.append(el("text", { x: g.m.l - 6, y: y + 4, "text-anchor": "end" }, this.log ? `1e${t}` : fmt(t)));
    }
    axes.append(el("rect", { x: g.m.l, y: g.m.t, width: g.w, height: g.h, class: "frame" }));
    axes.append(el("text", { x: g.m.l + g.w / 2, y: g.height - 4, "text-anchor": "middle", class: "label" },
      this.xLabel));
    svg.append(axes);
    for (const [name, s] of this.series) {
      const pts = s.points.filter(([, y]) => Number.isFinite(y) && (!this.log || y > 0));
      if (!pts.length) continue;
      const d = pts.map(([x, y], i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join("");
      svg.append(el("path", { d, class: "series", stroke: s.color, "data-series": name }));
      if (pts.length === 1) {
        svg.append(el("circle", { cx: sx(pts[0][0]), cy: sy(pts[0][1]), r: 3, fill: s.color }));
      }
    }
    if (hoverX !== null) {
      svg.append(el("line", { x1: sx(hoverX), x2: sx(hoverX), y1: g.m.t, y2: g.m.t + g.h, class: "cursor" }));
    }
    this.legendDraw();
  }

  legendDraw() {
    this.legend.replaceChildren();
    for (const [name, s] of this.series) {
      const item = document.createElement("span");
      item.className = "key";
      const sw = document.createElement("i");
      sw.className = "swatch";
      sw.style.background = s.color;
      const last = s.points[s.points.length - 1];
      item.append(sw, `${name}${last ? ` ${fmt(last[1])}` : ""}`);
      this.legend.append(item);
    }
  }

  hover(ev) {
    if (!this.scale) return;
    const rect = this.svg.getBoundingClientRect();
    const { g, xa, xb } = this.scale;
    const px = ((ev.clientX - rect.left) / rect.width) * g.width;
    const x = xa + ((px - g.m.l) / g.w) * (xb - xa);
    const parts = [];
    let nearest = null;
    for (const [name, s] of this.series) {
      let best = null;
      for (const p of s.points) if (best === null || Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
      if (best) {
        parts.push(`${name} ${fmt(best[1])}`);
        if (nearest === null || Math.abs(best[0] - x) < Math.abs(nearest - x)) nearest = best[0];
      }
    }
    if (nearest === null) return;
    this.readout.textContent = `${this.xLabel} ${nearest}: ${parts.join(" · ")}`;
    this.draw(nearest);
  }
}
