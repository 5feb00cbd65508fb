"""The example's samples are recognisable digits: a caramba-trained classifier is confident on them.

Slow (about 2 minutes on 2 cores: the example's full training run and the classifier's), so it
is marked ``slow``; docs/training.md ("Diffusion") records the numbers it measures.
"""

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

from caramba.diffusion.sample import find_denoiser, load_run, sample
from caramba.manifest.experiment import run_experiment
from caramba.store import RunStore

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TRAIN_BUDGET_S = 180  # the example must train in under 3 minutes on 2 cores
MIN_CONFIDENCE = 0.8


def classifier_confidence(run, images: np.ndarray, backend: str = "cpu") -> tuple[float, np.ndarray]:
    """(mean top-class softmax probability, predicted classes) of a classifier run (a ``TrainedRun``
    of examples/digits_mlp.yml) on ``images`` [n, 64] in [0, 1]."""
    from caramba import compute

    x = np.asarray(images, np.float64).reshape(len(images), -1)
    low = run.prep.lower(batch=len(x), outputs=["logits"])
    runner = compute.new(backend)
    try:
        for name, spec in low.params.items():
            runner.state[name] = runner.upload(np.asarray(run.params[name]), spec.dtype)
        feed = {k: runner.upload(x if k == "x" else np.zeros(t.shape, t.dtype.numpy)) for k, t in low.inputs.items()}
        logits = runner.compile(low.graph).run(feed)["logits"].download()
    finally:
        runner.close()
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return float(p.max(axis=1).mean()), p.argmax(axis=1)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="needs scikit-learn (caramba[data])")
def test_example_samples_are_recognisable_digits(tmp_path):
    store = RunStore(tmp_path)
    clf = run_experiment(EXAMPLES / "digits_mlp.yml", store=store)
    assert clf.ok
    t0 = time.perf_counter()
    res = run_experiment(EXAMPLES / "digits_diffusion.yml", store=store)
    seconds = time.perf_counter() - t0
    assert res.ok, [r.error for r in res.runs]
    assert seconds < TRAIN_BUDGET_S, seconds
    classifier = load_run(clf.runs[0].run_id, store)
    run = load_run(res.runs[0].run_id, store)
    samples = sample(find_denoiser(run.prep), run.params, n=256, seed=0)
    score, classes = classifier_confidence(classifier, samples)
    noise, _ = classifier_confidence(classifier, np.random.default_rng(0).random((256, 64)))
    print(f"train {seconds:.0f} s; classifier confidence: samples {score:.3f}, uniform noise {noise:.3f}; "
          f"classes {np.bincount(classes, minlength=10).tolist()}")
    assert score >= MIN_CONFIDENCE
    assert score - noise >= 0.05
    assert len(set(classes.tolist())) >= 8  # not one memorised digit
