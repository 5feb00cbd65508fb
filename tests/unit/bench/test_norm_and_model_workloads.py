"""The benchmark's norm/softmax backward, conv/pool and model workloads are declared consistently
and their caramba implementations agree with their references (small cases, cpu only)."""

import numpy as np
import pytest

from benchmarks.harness import Timing, _run_one
from benchmarks.report import TARGETS
from benchmarks.workloads import WORKLOADS, by_name

FAST = Timing(warmup=1, samples=2, min_sample_s=0.0, max_case_s=0.2)


def test_every_target_names_a_declared_case_and_labels_are_unique():
    labels = [(w.name, c.label) for w in WORKLOADS for c in w.cases()]
    assert len(labels) == len(set(labels))
    missing = [t[:2] for t in TARGETS if t[:2] not in set(labels)]
    assert missing == []


def test_heavy_workloads_stay_out_of_the_quick_suite():
    heavy = {"char_gpt_train_step", "gpt2_small_forward", "resnet18_forward"}
    for w in by_name(sorted(heavy)):
        assert all(c.suites == ("full",) for c in w.cases()), w.name


@pytest.fixture(scope="module")
def cpu():
    from caramba.compute import new

    r = new("cpu")
    yield r
    r.close()


@pytest.mark.parametrize("name", ["softmax_grad", "layer_norm_grad", "rms_norm_grad", "rms_norm"])
def test_norm_workloads_agree_on_cpu(cpu, name):
    (w,) = by_name([name])
    case = next(c for c in w.cases() if "quick" in c.suites)
    inputs = w.inputs(case, np.random.default_rng(0))
    res = _run_one(w, case, "caramba:cpu", lambda c, i: w.caramba(c, cpu, i), inputs, w.reference(case, inputs), FAST)
    assert res.status == "ok", res.note
    ref = w.reference(case, inputs)
    peer = _run_one(w, case, "numpy", lambda c, i: w.numpy(c, i), inputs, ref, FAST)
    assert peer.status == "ok", peer.note


def test_pool_workload_agrees_on_cpu(cpu):
    (w,) = by_name(["pool2d"])
    case = next(c for c in w.cases() if c.params["kind"] == "avg" and c.params["dtype"] == "float64")
    inputs = w.inputs(case, np.random.default_rng(0))
    res = _run_one(w, case, "caramba:cpu", lambda c, i: w.caramba(c, cpu, i), inputs, w.reference(case, inputs), FAST)
    assert res.status == "ok", res.note
