"""Submitted manifests are checked in a worker process with a time and a memory limit.

A manifest is a small program: variables are arithmetic, ``repeat`` and ``!include`` expand,
datasets are generated or read. Checked in the server's own process, a 2 KB manifest whose
variables square a number thirty times would hold the interpreter (and its lock) for hours:
no health check, no other request, not even SIGTERM. So validate, compile and submit check a
manifest here first:

- a fresh interpreter (``python -m caramba.api.sandbox``) whose environment holds no secrets
  (no API token, nothing named like a key or password), with one BLAS thread;
- an address-space limit (``RLIMIT_AS``): its baseline after start plus
  ``serve_validate_memory_mb``; a bigger allocation is a MemoryError there, not here;
- a wall-clock deadline (``serve_validate_timeout_s``) after which the worker is killed;
- dataset files only under the submission's data roots (``caramba.data.sources.data_roots``).

A job is a function of this module; its answer (or its error, already in the API's error
shape, with the staging folder removed from messages) comes back as one line of JSON. Too
slow or too big is a 422 (``ValidationLimit``) that says which limit, so a client fixes its
manifest; every worker busy for a whole deadline is a 503. A worker serves one job at a time
and is replaced after a timeout, a memory error, a crash or ``MAX_JOBS`` jobs.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from caramba.api.errors import Answered, Busy, ValidationLimit, error_body, status_of
from caramba.errors import CarambaError

MAX_JOBS = 50  # jobs a worker serves before it is replaced (caches and heap stay small)
STARTUP_S = 60.0  # a worker imports numpy, pydantic and the manifest package before its first job
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY$|^AWS_|^CARAMBA_API_TOKEN$", re.IGNORECASE)
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
WARM = ("caramba.api.runs", "caramba.manifest.compile", "caramba.run", "caramba.ir.codec")


# ---- jobs: run in the worker ----------------------------------------------------------------


def summary(prep: Any, low: Any | None = None) -> dict[str, Any]:
    """What a validated manifest holds, as the API reports it."""
    m = prep.manifest
    out = {
        "name": m.name,
        "description": m.description,
        "experiment": m.is_experiment,
        "nodes": len(m.topology.all_nodes),
        "datasets": sorted(m.datasets),
        "steps": m.trainer.steps if m.trainer else None,
        "targets": [{"name": t.name, "backend": t.backend, "runs": [r.id for r in t.runs]} for t in m.targets],
        "arms": [a.id for a in m.tuner.arms] if m.tuner else [],
        "dims": dict(prep.dims),
    }
    if low is not None:
        out.update(graph_nodes=len(low.graph.nodes), params=low.param_count())
    return out


def model_graph(prep: Any, dims: dict[str, int] | None = None) -> Any:
    """The model as an inference graph (no training behaviour), with ``dims`` bound."""
    from caramba.manifest.lower import lower_topology

    bound = {**prep.dims, **(dims or {})}
    return lower_topology(prep.manifest.topology, prep.doc, dims=bound, name=prep.manifest.name).graph


def validate_job(path: str, name: str, overrides: list[str]) -> dict[str, Any]:
    from caramba.manifest.compile import check

    prep, low = check(Path(path), overrides)
    return {"name": name, "summary": summary(prep, low), "rendered": prep.doc.as_yaml()}


def graph_job(path: str, dims: dict[str, int]) -> dict[str, Any]:
    from caramba.ir.codec import to_dict
    from caramba.manifest.compile import check

    prep, _ = check(Path(path))
    return to_dict(model_graph(prep, dims))


def plan_job(path: str, overrides: list[str], targets: list[str], run_ids: list[str]) -> dict[str, Any]:
    from caramba.api.runs import plan_submission

    return {"planned": len(plan_submission(Path(path), overrides, targets, run_ids))}


def spin_job(digits: int) -> dict[str, Any]:
    """Self-test: one long computation in C that holds the interpreter lock (a huge power)."""
    return {"bits": (3 ** (10 ** digits)).bit_length()}


def allocate_job(mib: int) -> dict[str, Any]:
    """Self-test: allocate ``mib`` MiB."""
    return {"bytes": len(bytearray(mib << 20))}


JOBS = {"validate": validate_job, "graph": graph_job, "plan": plan_job}
# Jobs that check the limits themselves (tests), known only to workers started with
# CARAMBA_SANDBOX_SELFTEST=1 in the environment; no route names them in any case.
SELFTEST_JOBS = {"spin": spin_job, "allocate": allocate_job}


def _cpu_budget(seconds: float) -> None:
    """Let the coming job use at most ``seconds`` more CPU time, then SIGXCPU ends the worker:
    the parent kills a late worker, but a worker whose parent died must not spin on alone (a
    job that holds the interpreter lock never sees its stdin close)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(use.ru_utime + use.ru_stime + seconds) + 2
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _serve(request: dict[str, Any], timeout_s: float = 0.0) -> dict[str, Any]:
    """One job in the worker; every outcome is a JSON-able answer."""
    from caramba.api.staging import relocate
    from caramba.data.sources import data_roots

    if timeout_s > 0 and sys.platform.startswith("linux"):
        _cpu_budget(timeout_s)
    try:
        with data_roots(request["roots"]):
            return {"ok": JOBS[request["job"]](**request["args"])}
    except CarambaError as exc:
        if request.get("folder"):
            relocate(exc, Path(request["folder"]))
        return {"error": error_body(exc), "status": status_of(exc)}
    except MemoryError:
        return {"memory": True}
    except RecursionError:
        detail = "the manifest nests too deeply to check (recursion limit)"
        return {"error": {"detail": detail, "type": "RecursionError", "errors": [
            {"type": "RecursionError", "message": detail}]}, "status": 422}
    except Exception as exc:  # a bug met by this manifest: still the client's answer, not a crash
        kind = type(exc).__name__
        detail = f"the manifest could not be checked: {kind}: {str(exc)[:300]}"
        hint = "this is probably a caramba bug; please report it with the manifest"
        return {"error": {"detail": detail, "type": kind, "errors": [
            {"type": kind, "message": detail, "hint": hint}]}, "status": 422}


def _jsonable(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str]) -> int:
    """The worker: import, cap the address space, then answer one JSON line per job line.
    ``argv``: the memory limit in MiB and the per-job time limit in seconds (0: none)."""
    memory_mb = int(argv[1]) if len(argv) > 1 else 0
    timeout_s = float(argv[2]) if len(argv) > 2 else 0.0
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the answers

    def send(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message, default=_jsonable).encode() + b"\n")
        answers.flush()

    import importlib

    if os.environ.get("CARAMBA_SANDBOX_SELFTEST") == "1":
        JOBS.update(SELFTEST_JOBS)
    for module in WARM:  # the first job pays no import
        importlib.import_module(module)
    from caramba.manifest.registry import registry

    registry()
    if memory_mb > 0 and sys.platform.startswith("linux"):
        import resource

        limit = _address_space() + (memory_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    send({"ready": True})
    for line in sys.stdin.buffer:
        answer = _serve(json.loads(line), timeout_s)
        send(answer)
        if "memory" in answer:
            return 0  # a heap that hit its limit is not trusted with another job
    return 0


# ---- the server side -------------------------------------------------------------------------


def submission_roots(folder: Path, settings: Any) -> list[str]:
    """Where a submitted manifest may read data: its own staging folder, the folders of the
    ``serve_data_roots`` setting, and scikit-learn's bundled data (when installed)."""
    from caramba.data import DataError
    from caramba.data.sources import sklearn_data_dir

    roots = [str(folder)]
    roots += [r.strip() for r in (getattr(settings, "serve_data_roots", "") or "").split(os.pathsep) if r.strip()]
    try:
        roots.append(str(sklearn_data_dir()))
    except DataError:
        pass
    return roots



def _worker_env() -> dict[str, str]:
    import caramba

    env = {k: v for k, v in os.environ.items() if not SECRET.search(k)}
    env.update(dict.fromkeys(THREADS, "1"), MALLOC_ARENA_MAX="2", PYTHONUNBUFFERED="1")
    src = str(Path(caramba.__file__).resolve().parent.parent)  # the worker imports this caramba
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


class _Worker:
    """One worker process and the unread part of its answers."""

    def __init__(self, memory_mb: int, timeout_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "caramba.api.sandbox", str(memory_mb), str(timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_worker_env(), close_fds=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the server, which kills it
        )
        self.buffer = b""
        self.ready = False
        self.jobs = 0

    def receive(self, deadline: float) -> dict[str, Any] | None:
        """The next answer; None at the deadline or when the worker died."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def send(self, request: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class Sandbox:
    """Runs jobs in worker processes, at most ``workers`` at a time, each within ``timeout_s``
    seconds and ``memory_mb`` MiB over its baseline. After the first job one idle worker is
    kept started, so the next job does not wait for an interpreter."""

    def __init__(self, timeout_s: float = 20.0, memory_mb: int = 2048, workers: int = 2, queue: int = 8) -> None:
        from caramba.errors import ConfigError

        if not timeout_s > 0 or memory_mb < 0 or workers < 1 or queue < 0:
            raise ConfigError(f"serve_validate_timeout_s must be > 0 and serve_validate_memory_mb >= 0 (0: no "
                              f"limit); got {timeout_s!r} and {memory_mb!r}")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.queue = queue  # requests that may wait for a worker (each holds a server thread)
        self._slots = threading.BoundedSemaphore(workers)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._waiting = 0
        self._warming = False
        self._lock = threading.Lock()
        self._closed = False

    def run(self, job: str, args: dict[str, Any], *, roots: list[str], folder: Path | None = None) -> Any:
        """The job's answer; its caramba error as ``Answered``; ``ValidationLimit`` past a limit;
        ``Busy`` when the queue is full or no worker came free within the time limit."""
        with self._lock:
            full = self._waiting >= self.queue
            self._waiting += not full
        if full:
            raise Busy("the server is checking as many manifests as it queues; retry in a few seconds")
        try:
            free = self._slots.acquire(timeout=self.timeout_s)
        finally:
            with self._lock:
                self._waiting -= 1
        if not free:
            raise Busy(f"every validation worker stayed busy for {self.timeout_s:g} s; retry in a few seconds")
        try:
            worker = self._take()
            try:
                worker.send({"job": job, "args": args, "roots": roots, "folder": str(folder) if folder else None})
            except OSError:  # it died between the check and the job
                self._retire(worker)
                raise Busy("the validation worker stopped before it took the job; retry") from None
            t0 = time.monotonic()
            answer = worker.receive(t0 + self.timeout_s)
            if answer is None or "memory" in answer:
                timed_out = answer is None and worker.proc.poll() is None
                self._retire(worker)
                if self._closed and not timed_out:
                    raise Busy("the server is shutting down")
                raise self._limit(job, timed_out, time.monotonic() - t0, worker.proc.returncode)
            self._give_back(worker)
            if "error" in answer:
                raise Answered(answer["error"], int(answer["status"]))
            return answer["ok"]
        finally:
            self._slots.release()
            self._warm()

    def _limit(self, job: str, timed_out: bool, seconds: float, code: int | None) -> ValidationLimit:
        what = {"validate": "validate", "graph": "compile", "plan": "plan"}.get(job, "check")
        if timed_out:
            return ValidationLimit(
                f"the manifest took longer than {self.timeout_s:g} s to {what} (the server's limit), so it was stopped",
                hint="look for variables that grow very large, big repeat counts or big datasets; the operator "
                "sets the limit with serve_validate_timeout_s")
        how = "" if code in (0, None) else f"; the worker stopped with exit code {code}"
        return ValidationLimit(
            f"the manifest needed more than {self.memory_mb} MiB to {what} (the server's limit; stopped after "
            f"{seconds:.1f} s{how})",
            hint="look for huge datasets, dims or repeat counts; the operator sets the limit with "
            "serve_validate_memory_mb")

    def _take(self) -> _Worker:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is not None and worker.proc.poll() is not None:  # died while idle
            self._retire(worker)
            worker = None
        if worker is None:
            worker = self._start()
        if not worker.ready:
            hello = worker.receive(time.monotonic() + STARTUP_S)
            if not hello or not hello.get("ready"):
                self._retire(worker)
                raise Busy(f"the validation worker did not start within {STARTUP_S:g} s "
                           f"(exit code {worker.proc.poll()}); the server's log has its error")
            worker.ready = True
        return worker

    def _give_back(self, worker: _Worker) -> None:
        worker.jobs += 1
        with self._lock:
            keep = not self._closed and worker.jobs < MAX_JOBS and not self._idle
            if keep:
                self._idle.append(worker)
        if not keep:
            self._retire(worker)

    def _start(self) -> _Worker:
        worker = _Worker(self.memory_mb, self.timeout_s)
        with self._lock:
            self._all.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def _warm(self) -> None:
        """Start the next worker now, so its imports overlap with whatever comes first."""
        with self._lock:
            if self._closed or self._idle or self._warming:
                return
            self._warming = True
        try:
            worker = self._start()
        finally:
            with self._lock:
                self._warming = False
        with self._lock:
            keep = not self._closed
            if keep:
                self._idle.append(worker)
        if not keep:
            self._retire(worker)

    def close(self) -> None:
        """Stop every worker, busy ones too (their requests answer at once that the server is
        shutting down). A job that comes later still runs, in a worker of its own that is not kept."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, [w for w in self._all if w not in self._idle]
            self._idle = []
        for worker in busy:
            worker.proc.kill()  # its request thread reads the end of the pipe and retires it
        for worker in idle:
            self._retire(worker)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
