"""Gradient spec table: float64 cases for every differentiable op, checked against central
finite differences by ``test_gradients.py`` on every available backend.

One or more ``GradCase`` per op ID. Input generators keep away from kinks (|x| small for relu,
ties for max), domain edges (log near 0) and steep regions, so the finite differences are
accurate to far below the 1e-6 tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .harness import BOOL, I64, Arg, arg, ints, uniform, values

U = uniform(-2.0, 2.0)
POS = uniform(0.5, 2.0)
PROB = uniform(0.05, 0.95)
UNIT = uniform(0.0, 1.0)


def away(lo: float = 0.2, hi: float = 2.0):
    """|x| in [lo, hi] with a random sign: away from kinks at 0."""

    def gen(rng, d, shape):
        return (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)).astype(d.numpy)

    return gen


def distinct(spacing: float = 0.1):
    """A random permutation of evenly spaced values: no near-ties (max, min, pooling)."""

    def gen(rng, d, shape):
        n = int(np.prod(shape))
        return ((rng.permutation(n) - n / 2) * spacing).reshape(shape).astype(d.numpy)

    return gen


AWAY = away()
BOOLS = uniform()  # coin flips for bool args


@dataclass(frozen=True, eq=False)
class GradCase:
    op: str
    label: str
    args: tuple[Arg, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    build: Callable[..., Any] | None = None  # (graph, input values) -> value(s)
    wrt: tuple[int, ...] | None = None  # inputs to differentiate (None: every float input)

    @property
    def id(self) -> str:
        return f"{self.op}[{self.label}]"


def c(op: str, label: str, *args: Arg, build: Callable[..., Any] | None = None, wrt: tuple[int, ...] | None = None,
      **attrs: Any) -> GradCase:
    return GradCase(op, label, tuple(args), attrs, build, wrt)


def a(shape, gen=U, dtype=None) -> Arg:
    return arg(shape, gen, dtype)


def idx(shape, hi: int) -> Arg:
    return arg(shape, ints(0, hi), I64)


def mask(shape) -> Arg:
    return arg(shape, BOOLS, BOOL)


def binary(op: str, gx=U, gy=U) -> list[GradCase]:
    return [
        c(op, "same", a((3, 4), gx), a((3, 4), gy)),
        c(op, "bcast-row", a((3, 4), gx), a((4,), gy)),
        c(op, "bcast-both", a((2, 1, 3), gx), a((4, 1), gy)),
        c(op, "scalar", a((), gx), a((5,), gy)),
    ]


def unary(op: str, gen=U, shapes=((7,), (2, 3)), **attrs) -> list[GradCase]:
    return [c(op, "x".join(map(str, s)), a(s, gen), **attrs) for s in shapes]


CASES: list[GradCase] = [
    # ---- math ----
    *binary("math.add"),
    *binary("math.sub"),
    *binary("math.mul"),
    *binary("math.div", U, away(0.5, 2.0)),
    *binary("math.pow", POS, U),
    c("math.pow", "int-exponent", a((6,), AWAY), a((), values([3.0])), wrt=(0,)),  # x < 0: no d/dy
    *binary("math.maximum", distinct(0.1), distinct(0.07)),
    *binary("math.minimum", distinct(0.1), distinct(0.07)),
    c("math.maximum", "ties", a((4,), values([1.0, 2.0, 3.0, -1.0])), a((4,), values([1.0, 0.0, 3.0, 2.0]))),
    *unary("math.neg"),
    *unary("math.abs", AWAY),
    *unary("math.exp"),
    *unary("math.log", POS),
    *unary("math.log1p", uniform(-0.5, 2.0)),
    *unary("math.expm1"),
    *unary("math.sqrt", POS),
    *unary("math.rsqrt", POS),
    *unary("math.square"),
    *unary("math.reciprocal", away(0.5, 2.0)),
    *unary("math.sin"),
    *unary("math.cos"),
    *unary("math.tanh"),
    *unary("math.erf"),
    c("math.clamp", "both", a((9,), uniform(-2.0, 2.0)), min=-1.0, max=1.0),
    c("math.clamp", "min-only", a((9,), uniform(-2.0, 2.0)), min=0.5),
    c("math.clamp", "max-only", a((2, 4), uniform(-2.0, 2.0)), max=0.25),
    c("math.where", "same", mask((3, 4)), a((3, 4)), a((3, 4))),
    c("math.where", "bcast", mask((3, 1)), a((4,)), a((2, 3, 4))),
    c("math.cast", "f64", a((2, 3)), dtype="float64"),
    # ---- activation ----
    *unary("activation.relu", AWAY),
    *unary("activation.leaky_relu", AWAY, alpha=0.1),
    *unary("activation.gelu", approximate="none"),
    c("activation.gelu", "tanh", a((2, 5)), approximate="tanh"),
    c("activation.gelu", "zero-and-tails", a((6,), values([0.0, -6.0, -12.0, 3.0, 1e-3, -1e-3]))),
    *unary("activation.silu"),
    *unary("activation.sigmoid"),
    *unary("activation.selu", AWAY),
    *unary("activation.elu", AWAY, alpha=0.7),
    *unary("activation.softplus"),
    c("activation.softplus", "beta2", a((6,)), beta=2.0),
    c("activation.swiglu", "one-input", a((3, 8))),
    c("activation.swiglu", "two-inputs", a((3, 4)), a((4,))),
    # ---- reduce ----
    *(c(op, label, a((2, 3, 4), gen), **attrs)
      for op, gen in (("reduce.sum", U), ("reduce.mean", U), ("reduce.logsumexp", U), ("reduce.max", distinct()),
                      ("reduce.min", distinct()), ("reduce.prod", away(0.5, 1.5)), ("reduce.variance", U))
      for label, attrs in (("all", {"axes": None}), ("axis1", {"axes": (1,)}), ("axes02-keep", {"axes": (0, 2), "keepdims": True}))),
    c("reduce.max", "ties", a((2, 3), values([1.0, 3.0, 3.0, 2.0, 2.0, 0.0])), axes=(1,)),
    c("reduce.prod", "one-zero", a((2, 3), values([1.5, 0.0, -2.0, 0.7, 1.2, 0.9])), axes=(1,)),
    c("reduce.prod", "two-zeros", a((4,), values([0.0, 1.5, 0.0, 2.0]))),
    c("reduce.variance", "unbiased", a((3, 5)), axes=(1,), correction=1),
    # ---- linalg ----
    c("linalg.matmul", "2d", a((3, 4)), a((4, 5))),
    c("linalg.matmul", "vec-mat", a((4,)), a((4, 5))),
    c("linalg.matmul", "mat-vec", a((3, 4)), a((4,))),
    c("linalg.matmul", "vec-vec", a((4,)), a((4,))),
    c("linalg.matmul", "batched", a((2, 3, 4)), a((4, 5))),
    c("linalg.matmul", "bcast-batch", a((2, 1, 3, 4)), a((3, 4, 2))),
    c("linalg.outer", "vv", a((3,)), a((4,))),
    # ---- shape ----
    c("shape.reshape", "split", a((2, 6)), shape=(3, 2, 2)),
    c("shape.transpose", "reverse", a((2, 3, 4))),
    c("shape.transpose", "perm", a((2, 3, 4)), perm=(1, 2, 0)),
    c("shape.concat", "axis1", a((2, 1)), a((2, 3)), a((2, 2)), axis=1),
    c("shape.split", "sizes", a((2, 5)), axis=1, sizes=(1, 4)),
    c("shape.split", "num", a((6, 2)), axis=0, num=3),
    c("shape.slice", "steps", a((7, 5)), starts=(1, 0), ends=(6, 5), steps=(2, 3)),
    c("shape.slice", "negative", a((6, 4)), starts=(5, 3), ends=(0, -5), steps=(-2, -1)),
    c("shape.slice", "plain", a((4, 5)), starts=(1,), ends=(3,), axes=(1,)),
    c("shape.pad", "constant", a((2, 3)), pads=(1, 0, 2, 1), value=0.5),
    c("shape.pad", "reflect", a((4, 5)), pads=(2, 1, 3, 4), mode="reflect"),
    c("shape.pad", "edge", a((3, 4)), pads=(2, 1, 0, 3), mode="edge"),
    c("shape.broadcast_to", "grow", a((3, 1)), shape=(2, 3, 4)),
    c("shape.expand_dims", "two", a((2, 3)), axes=(0, 2)),
    c("shape.squeeze", "one", a((2, 1, 3)), axes=(1,)),
    c("shape.gather", "axis1", a((3, 4)), idx((2, 3), 3), axis=1),
    c("shape.gather", "repeats", a((4, 2)), idx((6,), 3), axis=0),
    c("shape.scatter_add", "axis0", a((4, 3)), idx((5,), 3), a((5, 3)), axis=0),
    c("shape.slice_rows", "axis1", a((2, 8, 3)), idx((2,), 5), axis=1, size=3),
    c("shape.update_rows", "axis1", a((2, 6, 3)), a((2, 2, 3)), idx((2,), 4), axis=1),
    c("shape.upsample_nearest", "2x3", a((2, 2, 3)), scales=(2, 3)),
    c("shape.view_as_heads", "h2", a((2, 3, 4)), num_heads=2),
    c("shape.merge_heads", "h2", a((2, 2, 3, 2))),
    c("shape.last_token", "seq", a((2, 4, 3))),
    c("shape.flip", "axis", a((3, 4)), axes=(1,)),
    # ---- nn ----
    c("nn.softmax", "last", a((3, 5))),
    c("nn.softmax", "axis0", a((3, 5)), axis=0),
    c("nn.log_softmax", "last", a((3, 5))),
    c("nn.log_softmax", "axis0", a((4, 2)), axis=0),
    c("nn.layer_norm", "plain", a((3, 6))),
    c("nn.layer_norm", "gamma", a((3, 6)), a((6,))),
    c("nn.layer_norm", "affine-axis1", a((2, 3, 4)), a((3, 4)), a((3, 4)), axis=1),
    c("nn.rms_norm", "plain", a((3, 6))),
    c("nn.rms_norm", "gamma", a((2, 3, 4)), a((4,))),
    c("nn.group_norm", "plain", a((2, 4, 3)), num_groups=2),
    c("nn.group_norm", "affine", a((2, 6, 2, 2)), a((6,)), a((6,)), num_groups=3),
    c("nn.embedding", "repeats", idx((2, 3), 4), a((5, 3))),
    c("nn.conv1d", "plain", a((2, 3, 7)), a((4, 3, 3))),
    c("nn.conv1d", "stride-pad-dil-groups-bias", a((2, 4, 9)), a((6, 2, 3)), a((6,)),
      stride=(2,), padding=(1,), dilation=(2,), groups=2),
    c("nn.conv2d", "plain-bias", a((2, 2, 5, 4)), a((3, 2, 3, 2)), a((3,))),
    c("nn.conv2d", "stride-pad-groups", a((1, 4, 6, 5)), a((4, 2, 3, 3)), stride=(2, 1), padding=(1, 1), groups=2),
    c("nn.conv2d", "dilation-uneven", a((1, 2, 7, 6)), a((2, 2, 2, 2)), stride=(3, 2), dilation=(2, 1)),
    c("nn.max_pool2d", "k2", a((2, 2, 4, 4), distinct()), kernel=(2,)),
    c("nn.max_pool2d", "k3s2p1", a((1, 2, 5, 5), distinct()), kernel=(3,), stride=(2,), padding=(1,)),
    c("nn.avg_pool2d", "k2", a((2, 2, 4, 4)), kernel=(2,)),
    c("nn.avg_pool2d", "k3s2p1", a((1, 2, 5, 6)), kernel=(3,), stride=(2,), padding=(1,)),
    c("nn.dropout", "key", a((4, 5)), arg((), values([3]), I64), rate=0.3, seed=11),
    c("nn.dropout", "no-key", a((3, 3)), rate=0.5, seed=2),
    # ---- attention ----
    c("attention.sdpa", "plain", a((2, 3, 4)), a((2, 5, 4)), a((2, 5, 3))),
    c("attention.sdpa", "causal-scale", a((1, 3, 4)), a((1, 4, 4)), a((1, 4, 2)), causal=True, scale=0.3),
    c("attention.sdpa", "bool-mask", a((2, 3, 4)), a((2, 4, 4)), a((2, 4, 2)),
      a((3, 4), values([1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0]), BOOL)),
    c("attention.sdpa", "float-mask-bcast", a((2, 2, 3, 4)), a((1, 2, 4, 4)), a((2, 1, 4, 2)), a((3, 4))),
    c("attention.rope", "offset", a((2, 5, 6)), offset=3, base=100.0),
    c("attention.rope", "inv-freq-scale", a((2, 5, 6)), offset=7, inv_freq=(0.9, 0.21, 0.013), scale=1.3),
    # ---- train ----
    c("train.loss.mse", "mean", a((4, 3)), a((4, 3))),
    c("train.loss.mse", "none", a((5,)), a((5,)), reduction="none"),
    c("train.loss.cross_entropy", "mean", a((6, 4)), idx((6,), 3)),
    c("train.loss.cross_entropy", "smooth-sum", a((2, 3, 5)), idx((2, 3), 4), label_smoothing=0.1, reduction="sum"),
    c("train.loss.cross_entropy", "none", a((4, 3)), idx((4,), 2), reduction="none"),
    c("train.loss.bce", "logits", a((3, 4)), a((3, 4), UNIT)),
    c("train.loss.bce", "probs-sum", a((5,), PROB), a((5,), UNIT), from_logits=False, reduction="sum"),
    # ---- fft / vsa / hawkes (research families) ----
    c("fft.rfft", "odd", a((2, 5))),
    c("fft.rfft", "even", a((3, 8))),
    c("fft.irfft", "odd", a((2, 3, 2)), n=5),
    c("fft.irfft", "even", a((5, 2)), n=8),
    *[c("vsa.bind", f"{m}-{u}", a((2, 6)), a((6,)), model=m, unbind=u) for m in ("hrr", "map") for u in (False, True)],
    c("vsa.bundle", "hrr", a((3, 2, 4)), axis=0),
    c("vsa.permute", "shift2", a((2, 5)), shift=2),
    c("vsa.inverse_permute", "shift-3", a((2, 5)), shift=-3),
    c("vsa.similarity", "bcast", a((3, 6), AWAY), a((6,), AWAY)),
    c("hawkes.intensity", "2d", a((2,), POS), a((2, 2, 2), POS), a((2, 2, 2), POS),
      a((6,), values([0.1, 0.5, 0.9, 1.7, 2.2, 3.0])), arg((6,), values([0, 1, 1, 0, 1, 0]), I64),
      a((4,), values([0.3, 1.0, 2.5, 4.0])), wrt=(0, 1, 2)),
    c("hawkes.kernel_matrix", "2d", a((2, 2, 2), POS), a((2, 2, 2), POS),
      a((5,), values([0.2, 0.6, 1.1, 1.3, 2.9])), arg((5,), values([1, 0, 0, 1, 1]), I64), wrt=(0, 1)),
    c("hawkes.log_likelihood", "2d-batch", a((2,), POS), a((2, 2, 1), uniform(0.1, 0.4)), a((2, 2, 1), POS),
      a((2, 4), values([0.2, 0.6, 1.1, 2.0, 0.3, 0.4, 1.8, 2.5])), arg((2, 4), values([1, 0, 0, 1, 0, 0, 1, 1]), I64),
      a((2,), values([2.5, 3.0])), wrt=(0, 1, 2)),
    # ---- causal (W a DAG: strictly upper triangular; data with correlated columns) ----
    c("causal.do_calculus", "one-intervened", a((3, 3), values([0, 0.6, -0.4, 0, 0, 0.8, 0, 0, 0])), a((3,)),
      a((3,), POS), arg((3,), values([False, True, False]), BOOL), a((3,)), wrt=(0, 1, 2, 4)),
    c("causal.counterfactual", "rows", a((3, 3), values([0, 0.6, -0.4, 0, 0, 0.8, 0, 0, 0])), a((2, 3)),
      arg((3,), values([True, False, False]), BOOL), a((3,)), wrt=(0, 1, 3)),
    c("causal.dag_markov_factorization", "rows", a((3, 3), values([0, 0.6, -0.4, 0, 0, 0.8, 0, 0, 0])), a((3,)),
      a((3,), POS), a((4, 3))),
    c("causal.backdoor_adjustment", "adjust", a((10, 4)), treatment=0, outcome=3, adjust=[1, 2]),
    c("causal.frontdoor_adjustment", "mediated", a((10, 3)), treatment=0, mediator=1, outcome=2),
    c("causal.cate", "interacted", a((10, 4)), treatment=0, outcome=3, covariates=[1, 2]),
    c("causal.iv_estimate", "2sls", a((10, 5)), treatment=0, outcome=4, instruments=[1, 2], covariates=[3]),
    # ---- active_inference / markov_blanket (distributions need not be normalised for the math) ----
    c("active_inference.belief_update", "batch", a((3, 4), PROB), a((2, 3), PROB), a((2, 4), PROB)),
    c("active_inference.free_energy", "batch", a((2, 4), PROB), a((3, 4), PROB), a((2, 3), PROB), a((2, 4), PROB)),
    c("active_inference.expected_free_energy", "3-policies", a((4,), PROB), a((3, 4), PROB), a((4, 4, 2), PROB),
      a((3,)), arg((3, 2), values([0, 1, 1, 1, 1, 0]), I64), wrt=(0, 1, 2, 3)),
    c("active_inference.precision_weight", "prior", a((2, 3)), a((), POS), a((3,), PROB)),
    c("active_inference.precision_weight", "flat", a((4,)), a((), POS)),
    c("markov_blanket.mutual_information", "gaussian",
      a((4, 4), values([2, .5, .3, .1, .5, 1.5, .2, .4, .3, .2, 1.8, .6, .1, .4, .6, 1.2])), kind="gaussian",
      a=[0, 2], b=[3]),
    c("markov_blanket.mutual_information", "discrete", a((3, 4), PROB), kind="discrete"),
    c("markov_blanket.flow_internal", "batch", a((2, 3)), a((3, 4)), a((4,))),
    c("markov_blanket.flow_active", "vec", a((3,)), a((3, 2), uniform(-0.5, 0.5)), a((2,), uniform(-0.5, 0.5))),
    # ---- predictive_coding (relu kinks avoided: its cases use linear, tanh and sigmoid) ----
    *[c("predictive_coding.prediction", act, a((2, 3)), a((3, 4), uniform(-1, 1)), a((4,)), activation=act)
      for act in ("linear", "tanh", "sigmoid")],
    c("predictive_coding.prediction_error", "matrix", a((2, 3)), a((2, 3)), a((3, 3))),
    c("predictive_coding.prediction_error", "diagonal", a((2, 3)), a((2, 3)), a((3,), POS)),
    c("predictive_coding.prediction_error", "scalar", a((3,)), a((3,)), a((), POS)),
    *[c("predictive_coding.update_representation", act, a((2, 3)), a((3, 4), uniform(-1, 1)), a((4,)), a((2, 4)),
        a((2, 3)), activation=act, lr=0.3) for act in ("tanh", "sigmoid")],
    *[c("predictive_coding.update_weights", act, a((2, 3)), a((3, 4), uniform(-1, 1)), a((4,)), a((2, 4)),
        activation=act, lr=0.3) for act in ("linear", "tanh")],
]


def by_op() -> dict[str, list[GradCase]]:
    out: dict[str, list[GradCase]] = {}
    for case in CASES:
        out.setdefault(case.op, []).append(case)
    return out



