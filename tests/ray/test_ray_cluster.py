"""Actors on Ray (inside a loopback-only network namespace): the same experiment gives the same
results as on the local transport, a sweep spreads over the workers, and a worker killed
mid-run costs nothing that was recorded."""

from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "cluster_checks.py"


@pytest.fixture(scope="module")
def checks(netns_python, tmp_path_factory):
    return netns_python(SCRIPT, str(tmp_path_factory.mktemp("ray-cluster")), timeout=600)


def test_local_and_ray_give_identical_results(checks):
    sweep = checks["sweep"]
    local, ray = sweep["reference"], sweep["ray"]
    assert local["state"] == ray["state"] == "verified"
    assert ray["sha256"] == local["sha256"]  # bit-identical final parameters
    assert ray["metrics"] == local["metrics"] and ray["losses"] == local["losses"]


def test_a_sweep_spreads_over_the_ray_workers(checks):
    sweep = checks["sweep"]
    assert sweep["ledger_ok"] and sweep["states"] == ["verified"]
    assert sorted(sweep["by_node"]) == ["worker-1", "worker-2"]
    assert sorted(len(v) for v in sweep["by_node"].values()) == [2, 2]


def test_a_killed_worker_is_survived(checks):
    fault = checks["fault"]
    ray, local = fault["ray"], fault["reference"]
    assert fault["killed_node"] is not None, "the run finished before a worker could be killed"
    assert ray["attempts"] == 2 and ray["node"] != fault["killed_node"]
    assert fault["killed_checkpoint"] and fault["resumed"] == [fault["killed_checkpoint"]]  # from its last checkpoint
    assert fault["zombie_entries"] == []  # the killed worker's experiment died with it
    assert fault["kept"], "entries recorded before the kill must all still be there"
    assert fault["ledger_ok"], fault["problems"]
    assert ray["state"] == "verified" and ray["sha256"] == local["sha256"] and ray["losses"] == local["losses"]
    assert f"actor 'worker:{fault['killed_node']}' died" in fault["dead_error"]


def test_backend_actors_are_placed_by_backend(checks):
    p = checks["placement"]
    assert p["location"] == "cpu" and p["has_matmul"]
    assert "needs backend:nope, which no node of the Ray cluster offers" in p["refused"]
