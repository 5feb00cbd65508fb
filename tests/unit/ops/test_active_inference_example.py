"""examples/active_inference_tmaze.yml against pymdp: the agent block, with the T-maze of
``test_active_inference.tmaze`` (written in the tests) as its checkpoint, reports the first-action
posterior q(u) that pymdp computes on the same model (posterior by ``run_vanilla_fpi``, policy
posterior by ``update_posterior_policies`` with gamma 16 over every 2-step policy): it goes to
the cue first (epistemic value)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.special import softmax

from .test_active_inference import all_policies, pymdp_policies, pymdp_posterior, tmaze
from .test_active_inference import pymdp as load_pymdp

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_checkpoint_is_the_tmaze():
    """The committed checkpoint's parameters give back the T-maze written in the tests."""
    from caramba.train import read_checkpoint

    tensors, _ = read_checkpoint(EXAMPLES / "checkpoints" / "tmaze_agent.safetensors")
    a, b, c, _ = tmaze()
    np.testing.assert_allclose(softmax(tensors["agent.model.a_logits"], axis=0), a, rtol=0, atol=1e-15)
    np.testing.assert_allclose(softmax(tensors["agent.model.b_logits"], axis=0), b, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(tensors["agent.model.c"], c)


def test_tmaze_example_matches_pymdp(tmp_path):
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLES / "active_inference_tmaze.yml", store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    s = res.runs[0].summary

    import jax

    load_pymdp()  # under x64 first (its MINVAL), then its inference module
    with jax.enable_x64(True):
        import pymdp.algos  # noqa: F401
    a, b, c, d = tmaze()
    obs = np.eye(7)[0]  # the centre
    q = pymdp_posterior(a, obs, d)
    pol = all_policies(4, 2)
    q_pi, _ = pymdp_policies(q, a, b, c, pol, 16.0, np.ones(len(pol)) / len(pol))
    q_u = np.array([q_pi[pol[:, 0] == u].sum() for u in range(4)])
    got = np.array([s["test.q_centre"], s["test.q_left"], s["test.q_right"], s["test.q_cue"]])
    np.testing.assert_allclose(got, q_u, rtol=0, atol=1e-9)
    np.testing.assert_allclose(q_u, [0.0, 0.098, 0.098, 0.803], rtol=0, atol=1e-3)  # the documented numbers
    assert s["test.cue_rate"] == 1.0, s  # every episode's first action is the cue
    # free energy at the posterior = surprise -ln P(centre) = 0
    assert abs(s["test.free_energy"]) < 1e-12, s


def test_tmaze_episodes_dataset():
    """generated kind tmaze: first steps at the centre (outcome 0), prior D, the cue action 3."""
    from caramba.data.sources import load_dataset

    ds = load_dataset("e", {"source": "generated", "kind": "tmaze", "n": 10, "seed": 1,
                            "split": {"train": 0.5, "val": 0.0, "test": 0.5}})
    arr = ds.arrays("test")
    np.testing.assert_array_equal(arr["obs"], np.tile(np.eye(7)[0], (5, 1)))
    np.testing.assert_array_equal(arr["prior"], np.tile([0.5, 0.5, 0, 0, 0, 0, 0, 0], (5, 1)))
    assert set(arr["context"]) <= {0, 1} and set(arr["cue"]) == {3}
