"""sample.token: the same tokens on cpu and xla, the right distribution, transformers' processors.

- cpu and xla give identical tokens for every setting (batch > 1, V up to 50,000);
- 20,000 draws (a batch of identical rows: the row counter makes them independent) match the
  filtered softmax, computed here from the definition in plain NumPy, by a chi-square test;
- ``sample.filtered_probs`` equals the softmax of transformers' own logits processors, built in
  float64 torch in the order ``generate`` applies them;
- greedy, top_k=1 and temperature 0; attribute and input errors; backends that refuse it.
"""

from __future__ import annotations

import numpy as np
import pytest

from caramba import ir, ops
from caramba.compute import build_info, new
from caramba.errors import GraphError, UnsupportedOperation
from caramba.ops import sample

from .research_helpers import runner

GOLDEN, MIX1, MIX2, U64 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, (1 << 64) - 1

SETTINGS = {
    "greedy": {"temperature": 0.0},
    "t0.7": {"temperature": 0.7},
    "k5": {"top_k": 5},
    "p0.9": {"top_p": 0.9},
    "minp0.1": {"min_p": 0.1},
    "rep1.3": {"repetition_penalty": 1.3},
    "t0.7-k5-p0.9": {"temperature": 0.7, "top_k": 5, "top_p": 0.9},
    "t1.3-p0.8-minp0.05": {"temperature": 1.3, "top_p": 0.8, "min_p": 0.05},
    "all": {"repetition_penalty": 1.3, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.02},
}


EXES: dict[tuple, object] = {}


def tokens(backend: str, logits, key=None, seen=None, **attrs) -> np.ndarray:
    """Run sample.token on ``backend`` (one compilation per graph signature and attributes)."""
    r = runner(backend)
    sig = (backend, logits.shape, logits.dtype.name, key is None, seen is None, tuple(sorted(attrs.items())))
    exe = EXES.get(sig)
    if exe is None:
        g = ir.Graph("sample")
        with g:
            x = g.input("x", logits.shape, ir.dtype(logits.dtype.name))
            k = None if key is None else g.input("k", (), "int64")
            s = None if seen is None else g.input("s", seen.shape, "bool")
            g.output("t", ops.sample.token(x, k, s, **attrs))
        exe = EXES[sig] = r.compile(g)
    ins = {"x": logits} | ({} if key is None else {"k": np.array(key, dtype=np.int64)}) | ({} if seen is None else {"s": seen})
    out = exe.run({n: r.upload(v) for n, v in ins.items()})["t"].download()
    assert out.dtype == np.int64 and out.shape == (logits.shape[0],)
    return out


# ---- an independent reference, from the definition ------------------------------------------------


def _mix(z: int) -> int:
    z &= U64
    z = ((z ^ (z >> 30)) * MIX1) & U64
    z = ((z ^ (z >> 27)) * MIX2) & U64
    return z ^ (z >> 31)


def stream(seed: int, key: int | None, row: int) -> float:
    s = _mix(seed) if key is None else _mix((seed & U64) ^ _mix((key & U64) + GOLDEN))
    return (_mix(s + (row + 1) * GOLDEN) >> 11) * 2.0**-53


def expected_probs(x, seen=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, seed=0):
    """One row's filtered softmax, float64, written out from the definition (torch-like top-p)."""
    x = np.array(x, dtype=np.float64)
    if seen is not None:
        x[seen] = np.where(x[seen] > 0, x[seen] / repetition_penalty, x[seen] * repetition_penalty)
    if temperature == 0.0:
        return np.eye(x.size)[np.argmax(x)]
    x /= temperature
    if top_k:
        x[x < np.sort(x)[::-1][min(top_k, x.size) - 1]] = -np.inf
    if top_p < 1.0:
        order = np.argsort(x)
        p = np.exp(x[order] - x.max())
        drop = np.cumsum(p / p.sum()) <= 1 - top_p
        drop[-1] = False
        x[order[drop]] = -np.inf
    if min_p:
        p = np.exp(x - x.max())
        p /= p.sum()
        x[p < min_p * p.max()] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()


def chi_square_p(counts: np.ndarray, p: np.ndarray) -> float:
    """scipy's chisquare on the cells with p > 0, small cells (expected < 5) merged."""
    from scipy.stats import chisquare

    assert counts[p == 0].sum() == 0, f"filtered tokens drawn: {np.flatnonzero((p == 0) & (counts > 0))}"
    n = counts.sum()
    exp, obs = n * p[p > 0], counts[p > 0]
    small = exp < 5
    exp_m, obs_m = list(exp[~small]), list(obs[~small])
    if small.any():
        exp_m.append(exp[small].sum())
        obs_m.append(obs[small].sum())
        if exp_m[-1] < 5 and len(exp_m) > 1:  # still small: merge into the smallest big cell
            j = int(np.argmin(exp_m[:-1]))
            exp_m[j] += exp_m.pop()
            obs_m[j] += obs_m.pop()
    if len(exp_m) < 2:
        return 1.0
    return float(chisquare(np.array(obs_m, float), np.array(exp_m, float)).pvalue)


# ---- cpu and xla agree -----------------------------------------------------------------------------


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("v", [37, 1000, 50_000])
def test_cpu_and_xla_give_identical_tokens(setting, v):
    runner("xla")
    rng = np.random.default_rng(v)
    b = 6
    logits = (rng.normal(size=(b, v)) * 2.5).astype(np.float32)
    seen = rng.random((b, v)) < 0.2
    attrs = SETTINGS[setting]
    big = v > 10_000  # XLA's CPU sort and top_k take ~0.1 s at [6, 50000]: fewer draws there
    for key in (1, -7) if big else (0, 1, -7, 2**40 + 3):
        for seed in (12345,) if big else (0, 12345):
            kw = {"seed": seed, **attrs}
            cpu = tokens("cpu", logits, key, seen, **kw)
            np.testing.assert_array_equal(tokens("xla", logits, key, seen, **kw), cpu, err_msg=f"{setting} key={key}")
    np.testing.assert_array_equal(tokens("xla", logits, **attrs), tokens("cpu", logits, **attrs))


def test_stream_is_the_formula_and_bit_identical_on_xla():
    for seed, key in ((0, None), (7, 0), (-1, -5), (2**63 + 11, 2**62)):
        want = np.array([stream(seed, key, r) for r in range(1000)])
        k = None if key is None else np.array(key, dtype=np.int64)
        got = sample.uniforms(seed, k, 1000)
        assert got.tobytes() == want.tobytes()
    assert len(np.unique(sample.uniforms(3, np.array(1, np.int64), 4096))) == 4096
    runner("xla")
    import jax
    import jax.numpy as jnp

    from caramba.backends.xla.runner import enable_x64

    with enable_x64():
        got = jax.jit(lambda k: sample.uniforms(99, k, 1000, jnp))(jnp.asarray(-123456789, dtype=jnp.int64))
        assert np.asarray(got).tobytes() == np.array([stream(99, -123456789, r) for r in range(1000)]).tobytes()


# ---- the distribution ------------------------------------------------------------------------------

N = 20_000
P_VALUES: dict[str, float] = {}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_distribution_of_20000_draws_matches_the_filtered_softmax(setting):
    rng = np.random.default_rng(1)
    v = 40
    row = rng.normal(size=v) * 1.5
    seen_row = rng.random(v) < 0.3
    attrs = SETTINGS[setting]
    logits = np.tile(row, (N, 1))
    seen = np.tile(seen_row, (N, 1))
    got = tokens("cpu", logits, 2024, seen, seed=17, **attrs)
    p = expected_probs(row, seen_row, **attrs)
    np.testing.assert_allclose(sample.filtered_probs(row[None], attrs, seen_row[None])[0], p, rtol=1e-12, atol=1e-15)
    counts = np.bincount(got, minlength=v)
    if attrs.get("temperature") == 0.0:
        assert (got == np.argmax(p)).all()
        return
    pv = P_VALUES[setting] = chi_square_p(counts, p)
    print(f"chi-square {setting}: p = {pv:.4f} ({int((p > 0).sum())} tokens kept)")
    assert pv > 0.001, f"{setting}: chi-square p = {pv}"


def test_keys_give_independent_draws():
    """Varying the key (one row) samples the same distribution as varying the row."""
    rng = np.random.default_rng(2)
    row = rng.normal(size=12)
    p = expected_probs(row, temperature=0.9)
    u = np.array([sample.uniforms(5, np.array(k, np.int64), 1)[0] for k in range(N)])
    w = np.exp(row / 0.9 - (row / 0.9).max())
    c = np.cumsum(w)
    draws = np.minimum(np.searchsorted(c, u * c[-1], side="right"), row.size - 1)
    pv = chi_square_p(np.bincount(draws, minlength=row.size), p)
    print(f"chi-square keys 0..{N - 1}, one row: p = {pv:.4f}")
    assert pv > 0.001
    # and the op with a changing key gives different tokens
    logits = np.tile(row, (64, 1))
    assert not np.array_equal(tokens("cpu", logits, 1, temperature=0.9), tokens("cpu", logits, 2, temperature=0.9))


# ---- transformers' processors -----------------------------------------------------------------------


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s != "greedy"])
def test_filtered_probs_equal_transformers_processors(setting):
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(3)
    b, v = 5, 1000
    logits = rng.normal(size=(b, v)) * 3
    seen = rng.random((b, v)) < 0.05
    seen[:, 0] = True  # every row has a seen token (input_ids below)
    a = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0} | SETTINGS[setting]
    procs = lp.LogitsProcessorList()  # transformers 5.24 GenerationMixin._get_logits_processor order
    if a["repetition_penalty"] != 1.0:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(penalty=a["repetition_penalty"]))
    if a["temperature"] != 1.0:
        procs.append(lp.TemperatureLogitsWarper(a["temperature"]))
    if a["top_k"]:
        procs.append(lp.TopKLogitsWarper(top_k=a["top_k"]))
    if a["top_p"] < 1.0:
        procs.append(lp.TopPLogitsWarper(top_p=a["top_p"]))
    if a["min_p"]:
        procs.append(lp.MinPLogitsWarper(min_p=a["min_p"]))
    width = int(seen.sum(axis=1).max())
    ids = np.array([np.resize(np.flatnonzero(s), width) for s in seen])  # repeats pad: a set
    scores = procs(torch.tensor(ids), torch.tensor(logits, dtype=torch.float64))
    want = torch.softmax(scores, dim=-1).numpy()
    got = sample.filtered_probs(logits, SETTINGS[setting], seen)
    assert ((got == 0) == (want == 0)).all(), f"{setting}: different tokens filtered"
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


# ---- special cases ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cpu", "xla"])
def test_greedy_is_argmax_top_k_1_is_greedy_and_ignores_the_stream(backend):
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(8, 300))
    logits[3, [10, 20]] = 50.0  # a tie: the first maximum
    seen = rng.random((8, 300)) < 0.3
    greedy = tokens(backend, logits, 5, temperature=0.0)
    np.testing.assert_array_equal(greedy, np.argmax(logits, axis=-1))
    assert greedy[3] == 10
    for seed, key in ((0, 0), (1, 99), (123, -4)):
        np.testing.assert_array_equal(tokens(backend, logits, key, seed=seed, temperature=0.0), greedy)
        top1 = tokens(backend, logits, key, seed=seed, top_k=1, temperature=1.7)
        np.testing.assert_array_equal(np.delete(top1, 3), np.delete(greedy, 3))
        assert top1[3] in (10, 20)  # top-k keeps ties with the k-th logit, as transformers does
    penalized = np.where(seen, np.where(logits > 0, logits / 1.3, logits * 1.3), logits)
    np.testing.assert_array_equal(
        tokens(backend, logits, 5, seen, temperature=0.0, repetition_penalty=1.3), np.argmax(penalized, axis=-1)
    )


@pytest.mark.parametrize(
    "attrs, match",
    [
        ({"temperature": -0.1}, r"temperature must be a finite number >= 0"),
        ({"temperature": float("inf")}, r"temperature must be a finite number >= 0"),
        ({"top_k": -2}, r"top_k must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.01}, r"top_p must be in \(0, 1\]"),
        ({"min_p": -0.1}, r"min_p must be in \[0, 1\)"),
        ({"min_p": 1.0}, r"min_p must be in \[0, 1\)"),
        ({"repetition_penalty": 0.0}, r"repetition_penalty must be a finite number > 0"),
        ({"repetition_penalty": -1.0}, r"repetition_penalty must be a finite number > 0"),
        ({"top_k": 1.5}, r"top_k"),
    ],
)
def test_bad_attributes_name_the_attribute(attrs, match):
    g = ir.Graph("bad")
    with g, pytest.raises(GraphError, match=match):
        ops.sample.token(g.input("x", (2, 5), "float32"), **attrs)
    with pytest.raises(GraphError, match=match):
        sample.filtered_probs(np.zeros((2, 5)), attrs)


def test_bad_inputs():
    g = ir.Graph("bad")
    with g:
        x = g.input("x", (2, 5), "float32")
        cases = [
            ((g.input("v", (5,), "float32"),), r"logits must be \[batch, vocab\], got f32\[5\]"),
            ((g.input("x3", (1, 2, 5), "float32"),), r"logits must be \[batch, vocab\]"),
            ((g.input("xi", (2, 5), "int64"),), r"does not accept logits of dtype int64"),
            ((g.input("x0", (2, 0), "float32"),), r"at least one token"),
            ((x, g.input("k32", (), "int32")), r"key must be an int64 scalar, got i32\[\]"),
            ((x, g.input("kv", (2,), "int64")), r"key must be an int64 scalar, got i64\[2\]"),
            ((x, g.input("kf", (), "float32")), r"key must be an int64 scalar, got f32\[\]"),
            ((x, g.input("k", (), "int64"), g.input("s1", (2, 4), "bool")), r"seen must be bool\[2,5\]"),
            ((x, g.input("k2", (), "int64"), g.input("s2", (2, 5), "float32")), r"seen must be bool\[2,5\].*f32"),
            ((x, g.input("s3", (5,), "bool")), r"seen must be bool\[2,5\]"),
        ]
        for ins, match in cases:
            with pytest.raises(GraphError, match=match):
                g.call("sample.token", list(ins), {})


def test_a_python_int_key_is_an_int64_constant():
    g = ir.Graph("s")
    with g:
        g.output("t", ops.sample.token(g.input("x", (64, 9), "float64"), 5, temperature=0.9))
    r = runner("cpu")
    logits = np.tile(np.linspace(-1, 1, 9), (64, 1))
    got = r.compile(g).run({"x": r.upload(logits)})["t"].download()
    np.testing.assert_array_equal(got, tokens("cpu", logits, 5, temperature=0.9))


def test_op_is_random_and_not_differentiable():
    opdef = ir.get_op("sample.token")
    assert opdef.effect is ir.Effect.random and not opdef.differentiable
    assert {a.name for a in opdef.attrs} == {"seed", "temperature", "top_k", "top_p", "min_p", "repetition_penalty"}
    doc = opdef.doc
    order = [doc.index(w) for w in ("repetition penalty", "temperature:", "top-k:", "top-p:", "min-p:")]
    assert order == sorted(order), "the doc states transformers' order"


@pytest.mark.parametrize("spec", ["onnx", "webgpu", "cuda:compile_only"])
def test_other_backends_refuse_it_at_compile_time(spec):
    info = build_info(spec.split(":")[0])
    if not info.available and spec != "cuda:compile_only":
        pytest.skip(f"{spec} unavailable: {info.reason}")
    try:
        r = new(spec)
    except Exception as exc:  # compile-only cuda needs NVRTC
        pytest.skip(f"{spec}: {exc}")
    g = ir.Graph("s")
    with g:
        g.output("t", ops.sample.token(g.input("x", (2, 8), "float32"), g.input("k", (), "int64"), temperature=0.5))
    with pytest.raises(UnsupportedOperation, match=r"has no kernel for sample\.token"):
        r.compile(g)
    r.close()


def test_cuda_lowering_refuses_it_without_a_device():
    """The cuda capability table (device-free) does not claim it: lowering names the node."""
    from caramba.backends.cuda.runner import cuda_capabilities
    from caramba.compiler.lower import lower
    from caramba.compiler.passes import PassContext

    g = ir.Graph("s")
    with g:
        g.output("t", ops.sample.token(g.input("x", (2, 8), "float32"), temperature=0.5))
    with pytest.raises(UnsupportedOperation, match=r"cuda has no kernel for sample\.token"):
        lower(g, PassContext(cuda_capabilities(), "cuda", tuple(g.outputs)))


def test_manifests_name_it_by_its_asset():
    from caramba.manifest import ManifestError
    from caramba.manifest.compile import check

    src = """\
name: sampler
topology:
  inputs:
    x: {shape: [2, 4]}
    step: {shape: [], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 10}}
    - {id: tok, op: sample.token, in: [fc, step], config: {temperature: 0.7, top_k: 3, seed: 1}}
"""
    _, low = check(src)
    (node,) = [n for n in low.graph.nodes if n.op == "sample.token"]
    assert dict(node.attrs) == {"seed": 1, "temperature": 0.7, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}
    with pytest.raises(ManifestError, match=r"config 'top_p' must be in \(0, 1\], got 1.5"):
        check(src.replace("seed: 1", "seed: 1, top_p: 1.5"))
