"""Every optimizer against a plain NumPy reference, step by step (1e-12 relative, 20 steps),
plus hyperparameter validation. Optimizers are discovered from ``OPTIMIZERS``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba import compute, ir
from caramba.errors import ConfigError
from caramba.train import OPTIMIZERS, schedules
from caramba.train.optimizers import STEP

STEPS = 20
# One parameter above the cpu backend's parallel threshold (the Numba loop when installed),
# one below (NumPy), one scalar.
SHAPES = {"big": (180, 200), "small": (3, 5), "scalar": ()}


# ---- references: written from the documented equations, independent of the kernels ----------


def ref_sgd(p, g, s, t, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    g = g + weight_decay * p
    if momentum:
        s["buf"] = momentum * s["buf"] + (1 - dampening) * g
        g = g + momentum * s["buf"] if nesterov else s["buf"]
    return p - lr * g


def ref_adam(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    b1, b2 = betas
    if not decoupled:
        g = g + weight_decay * p
    s["m"] = b1 * s["m"] + (1 - b1) * g
    s["v"] = b2 * s["v"] + (1 - b2) * g**2
    if decoupled:
        p = p - lr * weight_decay * p
    mhat, vhat = s["m"] / (1 - b1**t), s["v"] / (1 - b2**t)
    return p - lr * mhat / (np.sqrt(vhat) + eps)


def ref_adamw(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    return ref_adam(p, g, s, t, lr, betas, eps, weight_decay, decoupled=True)


def ref_adamax(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    b1, b2 = betas
    g = g + weight_decay * p
    s["m"] = b1 * s["m"] + (1 - b1) * g
    s["u"] = np.maximum(b2 * s["u"], np.abs(g) + eps)
    return p - lr / (1 - b1**t) * s["m"] / s["u"]


def ref_rmsprop(p, g, s, t, lr, alpha=0.99, eps=1e-8, momentum=0.0, weight_decay=0.0):
    g = g + weight_decay * p
    s["v"] = alpha * s["v"] + (1 - alpha) * g**2
    d = g / (np.sqrt(s["v"]) + eps)
    if momentum:
        s["buf"] = momentum * s["buf"] + d
        d = s["buf"]
    return p - lr * d


def ref_adagrad(p, g, s, t, lr, eps=1e-10, weight_decay=0.0):
    g = g + weight_decay * p
    s["s"] = s["s"] + g**2
    return p - lr * g / (np.sqrt(s["s"]) + eps)


def ref_lion(p, g, s, t, lr, betas=(0.9, 0.99), weight_decay=0.0):
    b1, b2 = betas
    c = b1 * s["m"] + (1 - b1) * g
    s["m"] = b2 * s["m"] + (1 - b2) * g
    return p * (1 - lr * weight_decay) - lr * np.sign(c)


def ref_lamb(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
    b1, b2 = betas
    s["m"] = b1 * s["m"] + (1 - b1) * g
    s["v"] = b2 * s["v"] + (1 - b2) * g**2
    r = (s["m"] / (1 - b1**t)) / (np.sqrt(s["v"] / (1 - b2**t)) + eps) + weight_decay * p
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    trust = pn / rn if pn > 0 and rn > 0 else 1.0
    return p - lr * trust * r


REFERENCES = {
    "sgd": ref_sgd, "adam": ref_adam, "adamw": ref_adamw, "adamax": ref_adamax, "rmsprop": ref_rmsprop,
    "adagrad": ref_adagrad, "lion": ref_lion, "lamb": ref_lamb,
}
SLOTS = {"sgd": ("buf",), "adam": ("m", "v"), "adamw": ("m", "v"), "adamax": ("m", "u"), "rmsprop": ("v", "buf"),
         "adagrad": ("s",), "lion": ("m",), "lamb": ("m", "v")}

CONFIGS = [
    ("sgd", {}),
    ("sgd", {"momentum": 0.9, "weight_decay": 0.01}),
    ("sgd", {"momentum": 0.8, "nesterov": True}),
    ("sgd", {"momentum": 0.9, "dampening": 0.3}),
    ("adam", {}),
    ("adam", {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05}),
    ("adamw", {}),
    ("adamw", {"weight_decay": 0.1, "betas": (0.85, 0.995)}),
    ("adamax", {}),
    ("adamax", {"weight_decay": 0.02}),
    ("rmsprop", {}),
    ("rmsprop", {"momentum": 0.9, "alpha": 0.9, "weight_decay": 0.01}),
    ("adagrad", {}),
    ("adagrad", {"eps": 1e-6, "weight_decay": 0.03}),
    ("lion", {}),
    ("lion", {"weight_decay": 0.1, "betas": (0.95, 0.98)}),
    ("lamb", {}),
    ("lamb", {"weight_decay": 0.01, "eps": 1e-8}),
]


def test_every_registered_optimizer_has_a_reference_and_a_config():
    assert set(OPTIMIZERS) == set(REFERENCES)
    assert {name for name, _ in CONFIGS} == set(OPTIMIZERS)


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


def run_update(runner, opt, grads_seq, init):
    """Run the optimizer's update graph (gradients fed as inputs) for every gradient set."""
    with ir.Graph("update") as g:
        reads = {n: g.variable(n, s) for n, s in SHAPES.items()}
        grads = {n: g.input(f"g.{n}", s) for n, s in SHAPES.items()}
        step = g.variable(STEP, (), "int64", init="zeros") + g.constant(np.ones((), np.int64))
        report = opt.update(g, reads, grads, step)
        g.write(STEP, step)
        for k, v in report.items():
            g.output(k, v)
    for k in list(runner.state):
        del runner.state[k]
    for n, v in init.items():
        runner.state[n] = runner.upload(v)
    exe = runner.compile(g)
    history = []
    for gs in grads_seq:
        out = exe.run({f"g.{n}": runner.upload(v) for n, v in gs.items()})
        history.append(({n: runner.state[n].download() for n in SHAPES}, {k: float(t.download()) for k, t in out.items()}))
    return history


def reference(name, kwargs, grads_seq, init, lr_of, clip=None):
    params = {n: v.copy() for n, v in init.items()}
    slots = {n: {s: np.zeros(SHAPES[n]) for s in SLOTS[name]} for n in SHAPES}
    out = []
    for t, gs in enumerate(grads_seq, start=1):
        gs = dict(gs)
        if clip is not None:
            norm = math.sqrt(sum(float(np.sum(v * v)) for v in gs.values()))
            scale = min(1.0, clip / (norm + 1e-6))
            gs = {n: v * scale for n, v in gs.items()}
        for n in SHAPES:
            params[n] = REFERENCES[name](params[n], gs[n], slots[n], t, lr_of(t), **kwargs)
        out.append({n: v.copy() for n, v in params.items()})
    return out


def data(seed):
    rng = np.random.default_rng(seed)
    init = {n: rng.standard_normal(s) for n, s in SHAPES.items()}
    grads = [{n: rng.standard_normal(s) * (1 + t % 3) for n, s in SHAPES.items()} for t in range(STEPS)]
    return init, grads


def assert_close(got, want, what):
    for n in SHAPES:
        scale = max(float(np.max(np.abs(want[n]))), 1e-300)
        err = float(np.max(np.abs(got[n] - want[n]))) / scale
        assert err < 1e-12, f"{what}, parameter '{n}': relative error {err:.3g}"


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "decomposed"])
@pytest.mark.parametrize("name, kwargs", [pytest.param(n, k, id=f"{n}-{i}") for i, (n, k) in enumerate(CONFIGS)])
def test_matches_numpy_reference_for_20_steps(cpu, name, kwargs, fused):
    lr = 0.01 if name in ("lion", "lamb") else 0.05
    init, grads = data(hash((name, str(kwargs))) % 2**32)
    opt = OPTIMIZERS[name](lr, **kwargs, fused=fused)
    got = run_update(cpu, opt, grads, init)
    want = reference(name, kwargs, grads, init, lambda t: lr)
    for t, ((params, report), ref) in enumerate(zip(got, want, strict=True), start=1):
        assert_close(params, ref, f"{name}{kwargs} step {t}")
        assert report["lr"] == lr


@pytest.mark.parametrize("schedule", [
    schedules.constant(0.03),
    schedules.linear_warmup(0.05, 7),
    schedules.cosine(0.05, decay_steps=12, warmup_steps=4, final_lr=0.001),
    schedules.cosine(0.02, decay_steps=30),
], ids=["constant", "warmup", "cosine-warmup", "cosine"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "decomposed"])
def test_schedules_and_clipping_follow_the_reference(cpu, schedule, fused):
    init, grads = data(7)
    opt = OPTIMIZERS["adam"](schedule, clip_norm=50.0, fused=fused)
    got = run_update(cpu, opt, grads, init)
    want = reference("adam", {}, grads, init, schedule.value, clip=50.0)
    for t, ((params, report), ref) in enumerate(zip(got, want, strict=True), start=1):
        assert_close(params, ref, f"adam with {schedule} step {t}")
        assert report["lr"] == pytest.approx(schedule.value(t), rel=1e-15)
        norm = math.sqrt(sum(float(np.sum(v * v)) for v in grads[t - 1].values()))
        assert report["grad_norm"] == pytest.approx(norm, rel=1e-13)


def test_clipping_really_clips(cpu):
    init, grads = data(3)
    got = run_update(cpu, OPTIMIZERS["sgd"](1.0, clip_norm=0.5), grads[:1], init)
    delta = np.sqrt(sum(np.sum((got[0][0][n] - init[n]) ** 2) for n in SHAPES))
    assert delta == pytest.approx(0.5, rel=1e-5)


def test_numba_and_numpy_paths_agree_bit_for_bit():
    pytest.importorskip("numba")
    from caramba.backends.cpu.kernels import _train_loops as loops
    from caramba.ops import train as k

    rng = np.random.default_rng(5)
    p, g, m, v = (rng.standard_normal(40000) for _ in range(4))
    v = np.abs(v)
    cases = [
        ("adam", k.adam_elem, (p, g, m, v), (0.01, 0.7, 0.9, 0.999, 1e-8, 0.01, True, 0.05, 0.3)),
        ("adam", k.adam_elem, (p, g, m, v), (0.01, 1.0, 0.9, 0.999, 1e-8, 0.01, False, 0.05, 0.3)),
        ("sgd", k.sgd_elem, (p, g, m), (0.1, 1.0, 0.9, 0.1, True, 0.01)),
        ("adamax", k.adamax_elem, (p, g, m, v), (1.0, 0.9, 0.999, 1e-8, 0.01, 0.2)),
        ("rmsprop", k.rmsprop_elem, (p, g, v, m), (0.01, 1.0, 0.9, 1e-8, 0.9, 0.01)),
        ("adagrad", k.adagrad_elem, (p, g, v), (0.01, 1.0, 1e-10, 0.01)),
        ("lion", k.lion_elem, (p, g, m), (0.01, 1.0, 0.9, 0.99, 0.1)),
        ("lamb_dir", k.lamb_dir_elem, (p, g, m, v), (1.0, 0.9, 0.999, 1e-6, 0.01, 0.1, 0.01)),
    ]
    for name, elem, arrays, scalars in cases:
        expected = elem(*arrays, *scalars)
        outs = [np.empty_like(p) for _ in range(len(arrays) - 1)]
        getattr(loops, name)(*arrays, *outs, *scalars)
        for o, e in zip(outs, expected, strict=True):
            np.testing.assert_array_equal(o, e, err_msg=name)


@pytest.mark.parametrize("make, message", [
    (lambda: OPTIMIZERS["sgd"](-0.1), r"learning_rate must be in \(0, inf\], got -0.1"),
    (lambda: OPTIMIZERS["sgd"](0.1, momentum=-1), r"momentum must be in \[0, inf\], got -1"),
    (lambda: OPTIMIZERS["sgd"](0.1, nesterov=True), "nesterov needs momentum > 0"),
    (lambda: OPTIMIZERS["adam"](1e-3, betas=(0.9, 1.0)), r"beta2 must be in \[0, 1\), got 1.0"),
    (lambda: OPTIMIZERS["adam"](1e-3, betas=0.9), "betas must be a pair"),
    (lambda: OPTIMIZERS["adamw"](1e-3, eps=0), r"eps must be in \(0, inf\], got 0"),
    (lambda: OPTIMIZERS["rmsprop"](1e-3, alpha=1.5), r"alpha must be in \[0, 1\), got 1.5"),
    (lambda: OPTIMIZERS["lion"](1e-3, weight_decay=float("nan")), "weight_decay must be a finite number, got nan"),
    (lambda: OPTIMIZERS["lamb"]("fast"), "learning_rate must be a finite number, got 'fast'"),
    (lambda: OPTIMIZERS["adagrad"](1e-3, clip_norm=0.0), r"clip_norm must be in \(0, inf\], got 0.0"),
    (lambda: schedules.cosine(0.1, decay_steps=0), "decay_steps must be a positive int, got 0"),
    (lambda: schedules.linear_warmup(0.1, 2.5), "warmup_steps must be a positive int, got 2.5"),
    (lambda: schedules.cosine(0.1, 10, final_lr=0.5), r"final_lr must be in \[0, lr=0.1\], got 0.5"),
])
def test_constructors_validate_hyperparameters(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_adamw_is_adam_with_decoupled_decay():
    adamw, adam = OPTIMIZERS["adamw"](1e-3), OPTIMIZERS["adam"](1e-3, weight_decay=0.01)
    assert isinstance(adamw, OPTIMIZERS["adam"]) and adamw.op == adam.op == "train.optimizer.adam"
    assert adamw.attrs() == {**adam.attrs(), "decoupled": True}


def test_decomposed_updates_use_only_primitive_ops():
    for name, kwargs in CONFIGS:
        with ir.Graph() as g:
            reads = {"w": g.variable("w", (3,))}
            step = g.variable(STEP, (), "int64", init="zeros") + g.constant(np.ones((), np.int64))
            OPTIMIZERS[name](0.1, **kwargs, fused=False, clip_norm=1.0).update(g, reads, {"w": g.input("g", (3,))}, step)
        assert not [n.op for n in g.nodes if n.op.startswith("train.")], name
        ir.verify(g)


def test_state_names_are_hierarchical():
    opt = OPTIMIZERS["adam"](1e-3)
    assert opt.state_name("m", "encoder.fc1.weight") == "opt.adam.m.encoder.fc1.weight"


@pytest.mark.parametrize("name, kwargs", [("adam", {}), ("sgd", {"momentum": 0.9}), ("sgd", {}), ("adamax", {}),
                                          ("rmsprop", {"momentum": 0.9}), ("adagrad", {}), ("lion", {}),
                                          ("lamb", {})])
def test_large_updates_in_blocks_with_reused_outputs_match_the_reference(cpu, monkeypatch, name, kwargs):
    """A parameter above LOOP_SPLIT runs in blocks on the cpu workers (three here) and writes
    into outputs of two steps ago; a state tensor the caller still holds is never written."""
    pytest.importorskip("numba")
    from threadpoolctl import threadpool_limits

    from caramba.backends.cpu.kernels.train import LOOP_SPLIT

    monkeypatch.setitem(globals(), "SHAPES", {"huge": (LOOP_SPLIT // 256 + 1, 256)})
    init, grads = data(3)
    grads, lr = grads[:6], 0.01
    opt = OPTIMIZERS[name](lr, **kwargs)
    with threadpool_limits(3, user_api="blas"):
        first: list = []
        real_run = type(cpu).compile

        def compile_and_hold(runner, g, **kw):  # keep the state tensor after step 1 alive
            exe = real_run(runner, g, **kw)
            run = exe.run

            def run_and_hold(inputs):
                out = run(inputs)
                if not first:
                    first.append((runner.state["huge"], runner.state["huge"].download()))
                return out

            exe.run = run_and_hold
            return exe

        monkeypatch.setattr(type(cpu), "compile", compile_and_hold)
        from caramba.backends.cpu import native, workers

        pool = workers.native_pool(3)
        before = None if pool is None else pool.boxes[0, native.POSTED]
        got = run_update(cpu, opt, grads, init)
        if pool is not None:  # the blocks went to the native helpers
            assert pool.boxes[0, native.POSTED] > before
    want = reference(name, kwargs, grads, init, lambda t: lr)
    for t, (state, _) in enumerate(got):
        assert_close(state, want[t], f"{name} step {t + 1}")
    tensor, values = first[0]
    np.testing.assert_array_equal(tensor.download(), values)
