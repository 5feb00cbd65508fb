"""The manifest fuzzer's worker process (tests/unit/manifest/test_fuzz.py starts it).

It reads one JSON request a line on stdin and answers one JSON line on stdout, so the test can
kill it when a request hangs and start a fresh one. A request is ``{"op": "check" | "run",
"text", "source", "root", "overrides"}``:

- ``check`` does what ``caramba manifest validate`` does (``compile.check`` on the loaded file)
  and answers how it ended: ``ok``, ``error`` (a ManifestError or other CarambaError, with
  whether it is located) or ``traceback`` (any other exception: a bug), with CPU and wall time.
- ``run`` runs one training step of every planned run on the cpu backend into a fresh store
  (``run_experiment(..., ["trainer.steps=1"], backend="cpu")``) and answers each run's status.

The address space is capped so a mutant that allocates without bound fails fast with a
MemoryError here instead of swapping the machine.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
import traceback

MEMORY_LIMIT = 6 << 30


def _located(exc: BaseException) -> bool:
    if getattr(exc, "line", None) is not None or getattr(exc, "path", None):
        return True
    origin = getattr(exc, "origin", None)
    return origin is not None and getattr(origin, "line", None) is not None


def _check(req: dict) -> dict:
    from caramba.errors import CarambaError
    from caramba.manifest.compile import check
    from caramba.manifest.loader import load_string

    cpu0, wall0 = time.process_time(), time.perf_counter()
    out: dict = {}
    try:
        doc = load_string(req["text"], req["source"], root=req["root"], overrides=req.get("overrides") or None)
        prep, low = check(doc)
        m = prep.manifest
        runs = (sum(len(t.runs) for t in m.targets) or 1) * (len(m.tuner.arms) if m.tuner else 1)
        out.update(status="ok", experiment=m.is_experiment, params=low.param_count(), runs=runs,
                   checkpoints=any(r.checkpoint for t in m.targets for r in t.runs))
    except CarambaError as exc:
        out.update(status="error", type=type(exc).__name__, message=str(exc)[:2000], located=_located(exc))
    except (Exception, RecursionError, MemoryError) as exc:  # a bug in the validator
        tb = traceback.format_exc()
        out.update(status="traceback", type=type(exc).__name__, message=f"{type(exc).__name__}: {str(exc)[:500]}",
                   traceback=tb[-4000:])
    out.update(cpu=time.process_time() - cpu0, wall=time.perf_counter() - wall0)
    return out


def _run(req: dict) -> dict:
    from caramba.manifest.experiment import run_experiment
    from caramba.manifest.loader import load_string
    from caramba.store import RunStore

    with tempfile.TemporaryDirectory() as tmp:
        try:
            doc = load_string(req["text"], req["source"], root=req["root"])
            res = run_experiment(doc, overrides=["trainer.steps=1"], backend="cpu", store=RunStore(tmp))
            runs = [{"status": r.status, "error": r.error[:2000]} for r in res.runs]
            return {"status": "ok", "runs": runs}
        except BaseException as exc:  # a refusal at plan time counts as a failed run
            return {"status": "refused", "type": type(exc).__name__, "message": str(exc)[:2000],
                    "traceback": traceback.format_exc()[-4000:]}


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    from caramba.manifest.registry import registry

    registry()  # load the assets once, before the first timed request
    out = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # only answers go to the pipe
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        answer = _run(req) if req.get("op") == "run" else _check(req)
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
