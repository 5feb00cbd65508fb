"""diffusion.noise: shapes, the statistics of its noise and timesteps, determinism, bad configs."""

import numpy as np
import pytest

from caramba import compute
from caramba.manifest import ManifestError
from caramba.manifest.compile import check, prepare


def manifest(config: str, shape: str = "[batch, 16]", extra: str = "") -> str:
    return f"""
name: noise-test
topology:
  inputs: {{x: {{shape: {shape}}}}}
  dims: {{batch: 2048}}
  nodes:
    - {{id: noise, op: diffusion.noise, in: [x], out: [x_t, t_emb, target, t], config: {config}}}
{extra}
  outputs: {{x_t: x_t, t_emb: t_emb, target: target, t: t}}
"""


def run_noise(config: str, x: np.ndarray, *, training: bool = True, step: int = 1) -> dict[str, np.ndarray]:
    prep = prepare(manifest(config, f"[batch, {x.shape[1]}]"), load_data=False)
    low = prep.lower(batch=len(x), training=training)
    r = compute.new("cpu")
    try:
        feed = {"x": r.upload(x)}
        if low.graph.has_node("step"):  # the layer's step key (a TrainStep feeds its counter)
            feed["step"] = r.upload(np.array(step, np.int64))
        return {k: v.download() for k, v in r.compile(low.graph).run(feed).items()}
    finally:
        r.close()


def test_ports_and_shapes():
    _, low = check(manifest("{t_features: 12}"))
    g = low.graph
    assert [g.type_of(g.outputs[k]).shape for k in ("x_t", "t_emb", "target", "t")] == [
        (2048, 16), (2048, 12), (2048, 16), (2048,)]
    assert not low.graph.has_node("step")  # evaluating: a constant key, no step input
    _, low = check(manifest("{scheduler: flow}", "[batch, 1, 4, 4]"))
    assert low.graph.type_of(low.graph.outputs["x_t"]).shape == (2048, 1, 4, 4)


@pytest.mark.parametrize("kind", ["ddpm", "flow"])
def test_noise_statistics_and_timesteps(kind):
    x = np.zeros((2048, 16))
    out = run_noise(f"{{scheduler: {kind}, steps: 50, t_features: 8}}", x)
    t = out["t"]
    target = out["target"]
    if kind == "ddpm":  # the target is the noise itself
        eps = target
        ts = t * 50
        np.testing.assert_allclose(ts, np.round(ts), atol=1e-9)
        assert set(np.round(ts).astype(int)) == set(range(50))  # every timestep is drawn
        ab = np.cumprod(1 - np.linspace(2e-3, 0.4, 50))[np.round(ts).astype(int)]
        np.testing.assert_allclose(out["x_t"], np.sqrt(1 - ab)[:, None] * eps, rtol=1e-10)  # x0 = 0
    else:  # velocity eps - x0 with x0 = 0
        eps = target
        assert t.min() >= 0 and t.max() < 1 and t.min() < 0.01 and t.max() > 0.99
        np.testing.assert_allclose(out["x_t"], t[:, None] * eps, rtol=1e-10)
        assert abs(t.mean() - 0.5) < 0.02
    assert abs(eps.mean()) < 0.01 and abs(eps.std() - 1) < 0.01  # 32768 standard normal draws
    assert abs(np.corrcoef(t, eps[:, 0])[0, 1]) < 0.1  # timesteps and noise are separate streams


def test_fresh_per_step_reproducible_per_step_and_seed():
    x = np.random.default_rng(0).random((64, 16))
    a, b = run_noise("{}", x, step=7), run_noise("{}", x, step=7)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    c = run_noise("{}", x, step=8)
    assert not np.allclose(a["target"], c["target"]) and not np.allclose(a["t"], c["t"])
    d = run_noise("{seed: 1}", x, step=7)
    assert not np.allclose(a["target"], d["target"])
    e1, e2 = run_noise("{}", x, training=False), run_noise("{}", x, training=False)
    np.testing.assert_array_equal(e1["target"], e2["target"])  # evaluation: the same noise every time


def test_data_range_maps_to_minus_one_one():
    x = np.full((8, 4), 1.0)
    out = run_noise("{scheduler: flow, data_range: [0.0, 1.0]}", x)
    x0 = out["x_t"] - out["t"][:, None] * out["target"]  # x_t = x0 + t (eps - x0) = x0 + t v
    np.testing.assert_allclose(x0, 1.0, rtol=1e-10)  # 1.0 is the top of [0, 1]: x0 = 1
    out = run_noise("{scheduler: flow, data_range: [0.0, 2.0]}", x)
    np.testing.assert_allclose(out["x_t"] - out["t"][:, None] * out["target"], 0.0, atol=1e-12)  # the middle


@pytest.mark.parametrize("config, msg", [
    ("{t_features: 7}", "even number"),
    ("{data_range: [1.0, 0.0]}", "low < high"),
    ("{data_range: [0.0]}", "must be \\[low, high\\], got \\[0.0\\]"),
    ("{scheduler: ddim}", "ddim"),
    ("{schedule: quadratic}", "quadratic"),
    ("{steps: 0}", "steps"),
    ("{stepz: 10}", "did you mean 'steps'"),
    ("{scheduler: flow, schedule: cosine}", "schedule configure the DDPM beta schedule; scheduler flow has none"),
    ("{scheduler: flow, beta_end: 0.1}", "beta_end configure"),
])
def test_bad_configs_are_located_errors(config, msg):
    with pytest.raises(ManifestError, match=msg) as exc:
        check(manifest(config))
    assert exc.value.loc is not None and exc.value.loc.line >= 7


def test_bad_input_is_refused():
    with pytest.raises(ManifestError, match="needs a float input"):
        check(manifest("{}", "[batch]"))
