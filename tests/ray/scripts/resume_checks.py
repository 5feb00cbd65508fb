"""Ray resume check, run by tests/ray/test_ray_resume.py inside netns-run (loopback only).

`caramba research run M --cluster ray` is started in a child process and SIGKILLed (with every
process it started: Ray's head and its workers) once the run has committed a checkpoint and
trained past it. `caramba research resume` then finishes the run on the same run ID; its final
parameters and loss series are compared with an uninterrupted run. Prints one JSON object on
the last line of stdout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(sys.argv[1])
LOCAL_TEST = Path(__file__).resolve().parents[2] / "unit" / "run" / "test_resume.py"


def _local_test() -> dict:
    import importlib.util

    # the slice below builds its manifest with tests/unit/blobs_manifest.py (imported relatively there)
    spec = importlib.util.spec_from_file_location("blobs_manifest", LOCAL_TEST.parents[1] / "blobs_manifest.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    ns: dict = {"blobs_manifest": helper.blobs_manifest}
    src = LOCAL_TEST.read_text()
    exec(src[src.index("STEPS = "):src.index("RUN = CliRunner()")], ns)  # one experiment for both tests
    return ns


STEPS, MANIFEST = _local_test()["STEPS"], _local_test()["MANIFEST"]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    victims = [proc.pid, *descendants(proc.pid)]
    for p in victims:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


def main() -> None:
    from caramba.run import resume_run, run_experiment
    from caramba.store import RunStore
    from caramba.train import read_checkpoint

    ROOT.mkdir(parents=True, exist_ok=True)
    path = ROOT / "resumable.yml"
    path.write_text(MANIFEST)
    t0 = time.time()
    whole = RunStore(ROOT / "whole")
    ref = run_experiment(path, store=whole).runs[0]

    root = ROOT / "killed"
    proc = subprocess.Popen([sys.executable, "-c", "from caramba.cli import main; main()", "research", "run", str(path),
                             "--cluster", "ray", "--workers", "1", "--store", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_at, run_id = None, None
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (root / "runs.sqlite").exists():
                store = RunStore(root)
                recs = store.list(5)
                if recs and recs[0].step >= 230 and store.artifacts(recs[0].id, "checkpoint"):
                    run_id = recs[0].id
                    kill_tree(proc)
                    killed_at = store.get(run_id).step
                    break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    err = proc.stderr.read().decode()[-3000:] if proc.stderr else ""
    out: dict = {"reference": {"status": ref.status, "error": ref.error}, "killed_at": killed_at, "child_stderr": err}
    if run_id is None:
        print(json.dumps(out))
        return
    store = RunStore(root)
    time.sleep(0.5)
    out["status_after_kill"] = store.get(run_id).status
    owner = store.get(run_id).owner
    pid = owner.rpartition(":")[2]
    out["owner"] = owner
    out["owner_cmd"] = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:300] if Path(f"/proc/{pid}").exists() else None
    if out["status_after_kill"] != "interrupted":
        print(json.dumps(out))
        return
    res = resume_run(run_id, store)
    out["resumed"] = {"status": res.status, "error": res.error, "run_id": res.run_id}
    rec = store.get(run_id)
    out["final_step"], out["verdict"], out["steps_total"] = rec.step, rec.summary.get("verdict"), STEPS

    def final(s: RunStore, rid: str) -> dict:
        a = s.artifacts(rid, "checkpoint")[-1]
        tensors, _ = read_checkpoint(a.path, a.sha256)
        return {k: v.tobytes().hex() for k, v in sorted(tensors.items())}

    out["identical"] = final(whole, ref.run_id) == final(store, run_id)
    losses = [(s, v) for s, sp, n, v in store.metrics(run_id) if sp == "train" and n == "loss"]
    ref_losses = [(s, v) for s, sp, n, v in whole.metrics(ref.run_id) if sp == "train" and n == "loss"]
    out["steps"] = [s for s, _ in losses] == list(range(1, STEPS + 1))
    out["same_losses"] = losses == ref_losses
    from typer.testing import CliRunner

    from caramba.cli import app

    verify = CliRunner().invoke(app, ["notary", "verify", "--store", str(root)])
    out["ledger_ok"], out["verify_output"] = verify.exit_code == 0, verify.output[-2000:]
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
