"""Try a model: stream a language model's continuation of a prompt as server-sent events.

``POST /generate`` resolves the model first (a checkpoint folder must lie under the server's
``serve_data_roots``; a run ID is looked up in its store), so a bad request is an ordinary 4xx;
then the answer is a ``text/event-stream``:

- ``start``: the model, the prompt's token count and how many new tokens at most;
- ``token``: ``{id, text}`` per generated token (``text`` may be empty while a character's bytes
  are incomplete: the streaming decoder never emits half a UTF-8 character);
- ``end``: ``{tokens, reason}`` (``eos``, ``length`` or ``cancelled`` when the client left);
- ``error``: ``{message}`` if generation failed after it started.

One generation runs at a time on a server (others get 503 and Retry-After). The weights and KV
caches one generation may hold are bounded by ``serve_generate_memory_mb`` (from the checkpoint's
headers or a run checkpoint's size, before anything is read: a 413-style refusal, never an
out-of-memory server). The last model used stays loaded (weights, compiled graphs, caches) for
the next request that names the same model: the same folder with unchanged files, or the same
run with the same newest checkpoint; a longer request than its cache holds opens it anew.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from caramba.api.auth import AUTH
from caramba.api.errors import Busy, NotFound
from caramba.api.schemas import BUSY, ERRORS, WRITE_ERRORS, GenerateIn
from caramba.errors import ConfigError

router = APIRouter(tags=["generate"])
_LOCKS: dict[int, threading.Lock] = {}  # one generation at a time per app
# app -> (model key, tokenizer, prepared manifest, Generator or None, make(capacity))
_KEPT: dict[int, tuple[Any, Any, Any, Any, Any]] = {}


def _model_key(body: Any, folder: str | None, store_root: str) -> tuple:
    """What identifies a loaded model: the folder and its files' sizes and times, or the run and
    its newest checkpoint's digest (read from the store, not the checkpoint)."""
    if folder is not None:
        files = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder) if e.is_file())
        return ("folder", folder, tuple(files), body.backend)
    from caramba.store.runs import open_runs

    runs = open_runs(store_root)
    rec = runs.get(body.model)
    ckpts = runs.artifacts(rec.id, "checkpoint")
    return ("run", rec.id, ckpts[-1].sha256 if ckpts else "", body.backend)


def _roots(settings: Any) -> list[str]:
    return [r.strip() for r in (getattr(settings, "serve_data_roots", "") or "").split(os.pathsep) if r.strip()]


def _open(body: GenerateIn, state: Any, app: int) -> tuple[Any, Any, list[int], int, Any, str]:
    """(Generator, tokenizer, prompt ids, new tokens, sampler, model label), or a 4xx."""
    from caramba.data.sources import outside_roots
    from caramba.generate import Sampler, is_checkpoint_folder, model_context
    from caramba.generate.source import open_model
    from caramba.store.runs import RunNotFound

    sampler = Sampler(temperature=body.temperature, top_k=body.top_k, top_p=body.top_p, min_p=body.min_p,
                      repetition_penalty=body.repetition_penalty)
    looks_like_path = "/" in body.model or body.model.startswith((".", "~"))
    if looks_like_path:
        from caramba.data.sources import data_roots

        roots = _roots(state.settings)
        base = Path(roots[0]) if roots else Path("/")  # a relative path is relative to the first data root
        with data_roots(roots):  # one answer for every refused path, existing or not
            if not roots or outside_roots(base, body.model):
                raise ConfigError("the model folder is outside the folders this server reads data from",
                                  hint="put checkpoints under serve_data_roots, or name a run of this server")
        folder = os.path.realpath(os.path.join(base, body.model))
        if not is_checkpoint_folder(folder):
            raise NotFound("no Hugging Face checkpoint folder (config.json + safetensors) at that path")
        label = Path(folder).name
    else:
        folder, label = None, body.model
    limit_mb = getattr(state.settings, "serve_generate_memory_mb", 0) or 0
    max_bytes = int(float(limit_mb) * 2**20) if limit_mb > 0 else None
    try:
        key = _model_key(body, folder, str(state.store_root))
        kept = _KEPT.get(app)
        if kept is not None and kept[0] == key:
            _, tok, prep, gen, make = kept
        else:
            _drop(app)
            make, tok, prep = open_model(folder or body.model, backend=body.backend, dtype="float32",
                                         store=None if folder else str(state.store_root), config=None, text=True,
                                         max_bytes=max_bytes)
            gen = None
    except RunNotFound as exc:
        raise NotFound(exc.message) from None
    ids = tok.encode(body.prompt)
    n = body.max_new_tokens
    limit = model_context(prep)
    capacity = body.capacity or len(ids) + n - 1
    if limit is not None and body.capacity is None:
        capacity = min(capacity, limit)
    if len(ids) + n - 1 > capacity:
        raise ConfigError(f"the prompt ({len(ids)} tokens) and {n} new tokens need {len(ids) + n - 1} cache positions; "
                          f"the cache has {capacity}", hint="a shorter prompt, fewer new tokens, or a larger capacity")

    if gen is None or gen.capacity < capacity:  # open (or grow) it now: a refusal is still a 4xx
        if gen is not None:
            gen.close()
        _KEPT.pop(app, None)
        gen = make(capacity)
        gen.vocab()  # lowers the first graph (the memory limit is checked there) and loads the weights
    _KEPT[app] = (key, tok, prep, gen, make)
    return gen, tok, ids, n, sampler, label


def _drop(app: int) -> None:
    kept = _KEPT.pop(app, None)
    if kept is not None and kept[3] is not None:
        kept[3].close()


@router.post(
    "/generate",
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"},
               **ERRORS, **WRITE_ERRORS, **BUSY},
    response_class=StreamingResponse,
    dependencies=[AUTH],
)
async def generate(body: GenerateIn, request: Request) -> StreamingResponse:
    """Stream a continuation of ``prompt`` (events ``start``, ``token``, ``end``, ``error``)."""
    from starlette.concurrency import run_in_threadpool

    from caramba.api.sse import event

    lock = _LOCKS.setdefault(id(request.app), threading.Lock())
    if not lock.acquire(blocking=False):
        raise Busy("a generation is running on this server; retry when it ends")
    try:
        gen, tok, ids, n, sampler, label = await run_in_threadpool(_open, body, request.app.state.caramba,
                                                                       id(request.app))
    except BaseException:
        lock.release()
        raise
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    app = id(request.app)

    def work() -> None:
        count, reason = 0, "length"
        try:
            decoder = tok.stream(skip_special_tokens=True)  # the generator stays loaded for the next request
            for step in gen.generate([ids], n, eos_id=tok.eos_id, sampler=sampler, seed=body.seed):
                t = int(step[0])
                if stop.is_set():
                    reason = "cancelled"
                    break
                if t < 0:
                    reason = "eos"
                    break
                count += 1
                loop.call_soon_threadsafe(queue.put_nowait, ("token", {"id": t, "text": decoder.push(t)}))
                if t == tok.eos_id:
                    reason = "eos"
                    break
            rest = decoder.flush()
            if rest:
                loop.call_soon_threadsafe(queue.put_nowait, ("token", {"id": None, "text": rest}))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", {"tokens": count, "reason": reason}))
        except Exception as exc:  # reported in the stream: the 200 was already sent
            _drop(app)  # a failed generation leaves nothing behind
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            loop.call_soon_threadsafe(queue.put_nowait, ("error", {"message": message}))
        finally:
            lock.release()

    threading.Thread(target=work, name="caramba-generate", daemon=True).start()

    async def events():
        yield event("start", {"model": label, "prompt_tokens": len(ids), "max_new_tokens": n})
        try:
            while True:
                try:
                    kind, data = await asyncio.wait_for(queue.get(), timeout=1.0)
                except TimeoutError:
                    if await request.is_disconnected():
                        stop.set()
                        return
                    yield b": keep-alive\n\n"
                    continue
                yield event(kind, data)
                if kind in ("end", "error"):
                    return
        finally:
            stop.set()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
