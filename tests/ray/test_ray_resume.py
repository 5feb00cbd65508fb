"""A run on Ray (inside a loopback-only network namespace) killed with SIGKILL, driver, Ray
head and workers alike, is shown as interrupted and `caramba research resume` finishes it:
final parameters bit-identical to an uninterrupted run, no gap or duplicate in its loss series,
and the Notary verifies the ledger."""

from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "resume_checks.py"


def test_a_ray_run_killed_mid_training_resumes_bit_identical(netns_python, tmp_path):
    out = netns_python(SCRIPT, str(tmp_path), timeout=540)
    assert out["reference"]["status"] == "finished", out["reference"]
    assert out["killed_at"] is not None, f"the run was not killed mid-training: {out['child_stderr']}"
    assert out["status_after_kill"] == "interrupted", (out.get("owner"), out.get("owner_cmd"))
    assert out["resumed"]["status"] == "finished", out["resumed"]
    assert out["final_step"] == out["steps_total"] and out["verdict"] == "verified"
    assert out["identical"], "final parameters differ from the uninterrupted run"
    assert out["steps"], "gap or duplicate in the loss series"
    assert out["same_losses"]
    assert out["ledger_ok"], out["verify_output"]
