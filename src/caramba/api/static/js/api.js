// Talking to /api/v1: JSON calls with the token on state-changing ones, and metric streams
// (server-sent events) that resume where they left off after a disconnect.

export const API = "/api/v1";
const TOKEN_KEY = "caramba.token";

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) localStorage.setItem(TOKEN_KEY, value);
  else localStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.detail && typeof body.detail === "string") ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
    // FastAPI's own validation errors have detail: [{loc, msg}]; ours have errors: [...]
    this.errors = this.body.errors || (Array.isArray(this.body.detail)
      ? this.body.detail.map((d) => ({ type: d.type, message: d.msg, path: (d.loc || []).join(".") }))
      : []);
  }
}

export async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  const opts = { method, headers };
  if (method !== "GET") {
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
  }
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(API + path, opts);
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text };
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body);

// Follow a run's metrics. onPoints receives arrays of {step, name, value, ...}; onStatus the run
// when its status changes; onEnd when the run is finished and every point was delivered. The
// browser reconnects by itself and sends Last-Event-ID, so nothing is lost or repeated.
export function streamMetrics(runId, { after = null, onPoints, onStatus, onEnd } = {}) {
  const q = after === null ? "" : `?after=${encodeURIComponent(after)}`;
  const es = new EventSource(`${API}/runs/${encodeURIComponent(runId)}/metrics/stream${q}`);
  es.addEventListener("metrics", (ev) => onPoints && onPoints(JSON.parse(ev.data)));
  es.addEventListener("status", (ev) => onStatus && onStatus(JSON.parse(ev.data)));
  es.addEventListener("end", (ev) => {
    es.close();
    if (onEnd) onEnd(JSON.parse(ev.data));
  });
  return es;
}

// Stream a generation: POST /generate answers with server-sent events, which EventSource cannot
// send a body for, so the stream is read with fetch. onEvent(kind, data) per event; resolves at
// the end; abort with the returned controller.
export function streamGenerate(body, onEvent) {
  const controller = new AbortController();
  const headers = { Accept: "text/event-stream", "Content-Type": "application/json" };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const done = (async () => {
    const res = await fetch(`${API}/generate`, { method: "POST", headers, body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const text = await res.text();
      let data = null;
      try { data = JSON.parse(text); } catch { data = { detail: text }; }
      throw new ApiError(res.status, data);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const kind = (block.match(/^event: (.*)$/m) || [])[1];
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (kind) onEvent(kind, JSON.parse(data));
      }
    }
  })();
  return { controller, done };
}
