"""float32 optimizer updates (sgd, adam/adamw, adamax, rmsprop, adagrad, lion) run as Numba loops
of float32 operations (``_train_loops.<rule>_f32``): the same bits as the rule's NumPy expression
over the whole arrays (``caramba.ops.train.<rule>_elem``), for parameters of every size (one
loop, or blocks on the native or Python helpers) and every layout."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.backends.cpu.kernels import train as k
from caramba.compute.spare import Spare
from caramba.ops import train as t

SGD = [
    (0.01, 0.5, 0.9, 0.1, True, 1e-4),
    (0.01, 1.0, 0.9, 0.0, False, 0.0),
    (0.1, 0.3, 0.0, 0.0, False, 0.05),
    (1e-4, 1.0, 0.9, 0.3, False, 1e-4),
]


@pytest.mark.parametrize("scalars", SGD)
def test_float32_sgd_with_inf_nan_and_signed_zero_gradients_equals_the_numpy_rule(scalars):
    rng = np.random.default_rng(0)
    shape = (70001,)
    p, g, buf = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    g[:5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    with np.errstate(all="ignore"):  # inf and NaN gradients on purpose
        want = tuple(np.asarray(o, dtype=np.float32) for o in t.sgd_elem(p, g, buf, *scalars))
        got = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), scalars)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32 and a.shape == shape
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_float32_sgd_keeps_the_parameter_shape_and_never_writes_its_inputs():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((300, 257)).astype(np.float32)
    g = np.asfortranarray(rng.standard_normal((300, 257)).astype(np.float32))  # not C-contiguous
    buf = rng.standard_normal((300, 257)).astype(np.float32)
    before = [x.copy() for x in (p, g, buf)]
    new_p, new_buf = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), (0.1, 1.0, 0.9, 0.0, False, 0.0))
    want_p, want_buf = t.sgd_elem(p, g, buf, 0.1, 1.0, 0.9, 0.0, False, 0.0)
    assert new_p.shape == p.shape and new_buf.shape == p.shape
    np.testing.assert_array_equal(new_p, want_p)
    np.testing.assert_array_equal(new_buf, want_buf)
    for x, b in zip((p, g, buf), before, strict=True):
        np.testing.assert_array_equal(x, b)


@pytest.mark.parametrize("n", [600, 5000, 40000])  # one loop, one loop, blocks on the workers
@pytest.mark.parametrize("scalars", [(0.01, 0.5, 0.9, 0.1, True, 1e-4), (1e-4, 1.0, 0.9, 0.3, False, 1e-4),
                                     (0.1, 0.7, 0.0, 0.0, False, 0.0)])
def test_float32_sgd_loop_equals_the_numpy_rule_bit_for_bit(n, scalars):
    rng = np.random.default_rng(n)
    p, g, buf = ((rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32) for _ in range(3))
    want = [np.asarray(o, dtype=np.float32) for o in t.sgd_elem(p, g, buf, *scalars)]
    got = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), scalars)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


# ---- every stepped rule in float32 (``_train_loops.<rule>_f32``) ----------------------------

RULES = [  # (rule, element function, slot count, the rule's Python scalars)
    ("adam", t.adam_elem, 2, (1e-3, 0.7, 0.9, 0.95, 1e-8, 0.1, True, 1e-3 / (1 - 0.9**3), (1 - 0.95**3) ** 0.5)),
    ("adam", t.adam_elem, 2, (1e-3, 1.0, 0.9, 0.999, 1e-8, 0.01, False, 1e-3 / (1 - 0.9**1000), (1 - 0.999**1000) ** 0.5)),
    ("adam", t.adam_elem, 2, (3e-2, 0.3, 0.8, 0.99, 1e-6, 0.0, False, 3e-2 / 0.2, 0.1**0.5)),
    ("adam", t.adam_elem, 2, (3e-2, 1.0, 0.8, 0.99, 1e-6, 0.0, True, 3e-2 / 0.2, 0.1**0.5)),
    ("adamax", t.adamax_elem, 2, (0.7, 0.9, 0.999, 1e-8, 0.01, 1e-3 / (1 - 0.9**7))),
    ("adamax", t.adamax_elem, 2, (1.0, 0.9, 0.999, 1e-8, 0.0, 2e-3)),
    ("rmsprop", t.rmsprop_elem, 2, (1e-2, 0.7, 0.99, 1e-8, 0.9, 0.01)),
    ("rmsprop", t.rmsprop_elem, 2, (1e-2, 1.0, 0.9, 1e-8, 0.0, 0.0)),
    ("adagrad", t.adagrad_elem, 1, (1e-2, 0.7, 1e-10, 0.01)),
    ("adagrad", t.adagrad_elem, 1, (1e-1, 1.0, 1e-10, 0.0)),
    ("lion", t.lion_elem, 1, (1e-4, 0.7, 0.9, 0.99, 0.1)),
    ("lion", t.lion_elem, 1, (1e-4, 1.0, 0.9, 0.99, 0.0)),
    ("sgd", t.sgd_elem, 1, (0.01, 0.5, 0.9, 0.1, True, 1e-4)),
    ("lamb_dir", t.lamb_dir_elem, 2, (0.7, 0.9, 0.999, 1e-6, 0.01, 1 - 0.9**3, 1 - 0.999**3)),
    ("lamb_dir", t.lamb_dir_elem, 2, (1.0, 0.9, 0.999, 1e-6, 0.0, 1 - 0.9**1000, 1 - 0.999**1000)),
]
IDS = [f"{r[0]}-{i}" for i, r in enumerate(RULES)]
SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -3e38]  # incl. a subnormal and a huge value


def _state(rng, n, slots, special=True):
    """p, g and the slots: values over 16 decades, second moments non-negative; the gradient with
    inf, NaN, signed zeros, a subnormal and a huge value, then -0.0, NaN and inf in the parameter
    and every slot too (a sign of -0.0, the max of a NaN moment)."""
    arrays = [(rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32) for _ in range(2 + slots)]
    for a in arrays[3:] if slots == 2 else arrays[2:]:
        np.abs(a, out=a)
    if special:
        k_ = len(SPECIAL)
        arrays[1][:k_] = SPECIAL[: min(n, k_)]
        tail = [-0.0, -0.0, np.nan, np.inf, 0.0]
        for a in arrays:
            a[k_:k_ + len(tail)] = tail[: max(0, n - k_)]
        arrays[1][k_:k_ + len(tail)] = [-0.0, -0.0, 1.0, -1.0, 0.0][: max(0, n - k_)]
    return arrays


def _assert_bits(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def _numpy(elem, arrays, scalars):
    with np.errstate(all="ignore"):
        return [np.asarray(o, dtype=np.float32) for o in elem(*arrays, *scalars)]


@pytest.mark.parametrize("n", [1, 64, k.LOOP_MIN + 88, k.LOOP_SPLIT + 7])  # below/above LOOP_MIN and LOOP_SPLIT
@pytest.mark.parametrize("rule, elem, slots, scalars", RULES, ids=IDS)
def test_float32_rule_loop_equals_the_numpy_rule_bit_for_bit(rule, elem, slots, scalars, n):
    pytest.importorskip("numba")
    arrays = _state(np.random.default_rng(n), n, slots)
    want = _numpy(elem, arrays, scalars)
    with np.errstate(all="ignore"):
        got = k._run(Spare(4), rule, elem, tuple(arrays), scalars)
    _assert_bits(got, want)


@pytest.mark.parametrize("native", [True, False], ids=["native-helpers", "python-helpers"])
@pytest.mark.parametrize("rule, elem, slots, scalars", RULES, ids=IDS)
def test_float32_rule_in_blocks_on_the_workers_equals_the_numpy_rule(monkeypatch, rule, elem, slots, scalars, native):
    """Above LOOP_SPLIT the loop runs in blocks: on the native helpers (``<rule>_f32_block``, its
    scalars handed over as a float32 array) or, where there are none, on Python helper threads."""
    pytest.importorskip("numba")
    from caramba.backends.cpu import native as nat
    from caramba.backends.cpu import workers

    monkeypatch.setattr(workers, "count", lambda: 3)
    if not native:
        monkeypatch.setattr(workers, "native_pool", lambda parts: None)
    pool = workers.native_pool(3)
    if native and pool is None:
        pytest.skip("no native helpers on this platform")
    before = None if pool is None else pool.boxes[0, nat.POSTED]
    n = k.LOOP_SPLIT * 2 + 5
    arrays = _state(np.random.default_rng(7), n, slots)
    with np.errstate(all="ignore"):
        got = k._run(Spare(4), rule, elem, tuple(arrays), scalars)
    _assert_bits(got, _numpy(elem, arrays, scalars))
    if native:  # the blocks went to the native helpers
        assert pool.boxes[0, nat.POSTED] > before


@pytest.mark.parametrize("rule, elem, slots, scalars", RULES, ids=IDS)
def test_float32_rule_on_non_contiguous_inputs_keeps_shape_and_never_writes_its_inputs(rule, elem, slots, scalars):
    rng = np.random.default_rng(3)
    arrays = []
    for i, a in enumerate(_state(rng, 2 * 37 * 29, slots, special=False)):
        a = a.reshape(2 * 37, 29)
        arrays.append(a[::2] if i % 2 else np.asfortranarray(a[1::2]))  # strided rows, Fortran order
    before = [a.copy() for a in arrays]
    want = _numpy(elem, arrays, scalars)
    with np.errstate(all="ignore"):
        got = k._run(Spare(4), rule, elem, tuple(arrays), scalars)
    _assert_bits(got, want)
    assert all(o.shape == (37, 29) for o in got)
    for a, b in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.flags.writeable  # the loop's read-only views leave the caller's arrays as they were


def test_float32_rule_on_empty_and_scalar_parameters():
    for shape in [(0, 3), ()]:
        arrays = [np.full(shape, 0.5, np.float32) for _ in range(4)]
        scalars = RULES[0][3]
        got = k._run(Spare(4), "adam", t.adam_elem, tuple(arrays), scalars)
        _assert_bits(got, _numpy(t.adam_elem, arrays, scalars))


def _node(**attrs):
    import types

    return types.SimpleNamespace(attrs=attrs, id="opt")


STEPPED = [
    ("_adam", dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, decoupled=True), 2, True),  # AdamW
    ("_adam", dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, decoupled=False), 2, True),
    ("_adamax", dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01), 2, True),
    ("_rmsprop", dict(alpha=0.99, eps=1e-8, momentum=0.9, weight_decay=0.01), 2, False),
    ("_rmsprop", dict(alpha=0.99, eps=1e-8, momentum=0.0, weight_decay=0.0), 1, False),
    ("_adagrad", dict(eps=1e-10, weight_decay=0.01), 1, False),
    ("_lion", dict(beta1=0.9, beta2=0.99, weight_decay=0.1), 1, False),
    ("_sgd", dict(momentum=0.9, dampening=0.1, nesterov=True, weight_decay=1e-4), 1, False),
    ("_lamb", dict(beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01), 2, True),
]


@pytest.mark.parametrize("factory, attrs, slots, stepped", STEPPED, ids=[f"{s[0][1:]}-{i}" for i, s in enumerate(STEPPED)])
def test_float32_kernels_over_1000_steps_equal_their_numpy_path(monkeypatch, factory, attrs, slots, stepped):
    """The optimizer kernels as the runner calls them, steps 1..1000 (Adam's bias corrections
    move with the step), with the float32 loops and with them off (the NumPy rule): the same
    bits at every step."""
    pytest.importorskip("numba")
    n = 96
    dt = np.float32

    def run(loops):
        if not loops:  # as without Numba: the NumPy rule
            monkeypatch.setattr(k, "_loops", lambda: None)
        fn = getattr(k, factory)(_node(**attrs), None)
        r = np.random.default_rng(5)
        p = r.standard_normal(n).astype(dt)
        st = [np.zeros(n, dt) for _ in range(slots)]
        history = []
        for step in range(1, 1001):
            g = r.standard_normal(n).astype(dt)
            lr, gs = np.asarray(1e-3 * (1 + step % 7), dt), np.asarray(1.0 / (1 + step % 3), dt)
            extra = (np.asarray(step, np.int64),) if stepped else ()
            out = fn(p, g, lr, gs, *extra, *st)
            out = (out,) if isinstance(out, np.ndarray) else out
            p, st = out[0], list(out[1:])
            if step in (1, 2, 3, 10, 100, 999, 1000):
                history.append([o.copy() for o in out])
        return history

    for got, want in zip(run(True), run(False), strict=True):
        _assert_bits(got, want)


def test_float32_adamw_loop_follows_the_equations_in_float64_to_float32_accuracy():
    """Independent of the rule's code: AdamW from its equations in float64 (bias-corrected
    moments), 50 steps, against the float32 loop."""
    pytest.importorskip("numba")
    b1, b2, eps, wd, lr = 0.9, 0.95, 1e-8, 0.1, 1e-2
    fn = k._adam(_node(beta1=b1, beta2=b2, eps=eps, weight_decay=wd, decoupled=True), None)
    rng = np.random.default_rng(2)
    n = 700
    p = rng.standard_normal(n).astype(np.float32)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    rp, rm, rv = p.astype(np.float64), np.zeros(n), np.zeros(n)
    for step in range(1, 51):
        g = rng.standard_normal(n).astype(np.float32)
        p, m, v = fn(p, g, np.asarray(lr, np.float32), np.asarray(1.0, np.float32), np.asarray(step, np.int64), m, v)
        gd = g.astype(np.float64)
        rm = b1 * rm + (1 - b1) * gd
        rv = b2 * rv + (1 - b2) * gd * gd
        rp = rp - lr * wd * rp - lr * (rm / (1 - b1**step)) / (np.sqrt(rv / (1 - b2**step)) + eps)
    np.testing.assert_allclose(p, rp, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(v, rv, rtol=2e-5, atol=1e-12)
