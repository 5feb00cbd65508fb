"""Every example in examples/ on every backend: cpu, xla and onnx, each for a few steps.

Each case runs the example's own manifest with ``--backend B`` and the ``--set`` items in
``SETS`` (a few training steps, no periodic evaluation; the final test evaluation still runs).
A backend that is not installed here is skipped. A combination that cannot run is listed in
``REFUSED`` with the reason, and the test checks that it is refused *for that reason*: when the
backend gains the missing kernels the case fails until its entry is removed, so the table stays
true. Measured on a 2-core machine: 1.5 to 3 minutes for all cases together (xla compiles
dominate; the slowest case, llama_lora on xla, 20-35 s).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFESTS = sorted(EXAMPLES.glob("*.yml")) + sorted(EXAMPLES.glob("*/manifest.yml"))
BACKENDS = ("cpu", "xla", "onnx")

# The documented overrides: every example with a trainer runs 3 steps without periodic eval.
SETS = ["trainer.steps=3", "trainer.eval_every=0"]
# Evaluation-only manifests (trainer.steps: 0) run with their own settings, no --set.
# Model-only manifests: nothing to train or evaluate on any backend (validated, and their
# shapes checked, in tests/unit/manifest/test_examples.py).
MODEL_ONLY = {"gpt2_small.yml": "model-only manifest (no trainer, no eval runs): nothing to run"}
# (example, backend) -> (why, the ops named in the refusal)
# Empty since the research ops (vsa, fft, causal, hawkes) got ONNX lowerings
# (caramba.onnx.export_research), predictive_coding.* (caramba.onnx.export_predictive_coding) and
# active_inference.* / markov_blanket.mutual_information (caramba.onnx.export_active_inference):
# every example runs on every backend here.
REFUSED: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
NEEDS = {"digits_mlp.yml": "sklearn", "digits_cnn.yml": "sklearn", "digits_diffusion.yml": "sklearn"}


def _name(p: Path) -> str:
    return str(p.relative_to(EXAMPLES))


def test_the_table_names_real_examples_and_backends():
    names = {_name(p) for p in MANIFESTS}
    for example, backend in REFUSED:
        assert example in names and backend in BACKENDS
    assert set(MODEL_ONLY) | set(NEEDS) <= names


def _eval_only(path: Path) -> bool:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError:  # tags (!include ...): the trainer section is read by caramba itself
        return False
    trainer = doc.get("trainer") if isinstance(doc, dict) else None
    return isinstance(trainer, dict) and trainer.get("steps") == 0


def _usable(backend: str) -> None:
    from caramba.compute.registry import build_info

    info = build_info(backend)
    if not info.available:
        pytest.skip(f"backend {backend} is not installed here: {info.reason}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", MANIFESTS, ids=_name)
def test_example_runs_on_backend(path, backend, tmp_path):
    from caramba.manifest.errors import ManifestError
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    name = _name(path)
    _usable(backend)
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        pytest.skip(f"{name} needs {NEEDS[name]} (pip install 'caramba[data]')")
    sets = [] if name in MODEL_ONLY or _eval_only(path) else SETS
    if name in MODEL_ONLY:
        with pytest.raises(ManifestError, match="nothing to run"):
            run_experiment(path, sets, backend=backend, store=RunStore(tmp_path))
        return
    res = run_experiment(path, sets, backend=backend, store=RunStore(tmp_path))
    assert res.runs
    if (name, backend) in REFUSED:
        why, refused_ops = REFUSED[(name, backend)]
        for run in res.runs:
            assert run.status == "failed" and run.error.startswith("UnsupportedOperation"), (why, run.error)
            assert all(f"has no kernel for {op}" in run.error for op in refused_ops), (why, run.error)
        return
    assert res.ok, [r.error for r in res.runs]
    for run in res.runs:
        assert run.status == "finished"
        numbers = {k: v for k, v in run.summary.items() if isinstance(v, float)}
        assert numbers and all(math.isfinite(v) for v in numbers.values()), run.summary
