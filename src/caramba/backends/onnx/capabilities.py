"""The onnx capability table: what ONNX Runtime's CPU execution provider computes, per dtype.

Measured against onnxruntime 1.32 (``tests/unit/backends/onnx/test_capabilities.py`` builds a
session for every claimed op and dtype and checks the values against the cpu backend).
ORT's CPU provider has no float64 ``Erf``, ``Conv`` or ``AveragePool`` kernels and its float64
``Softplus``/``Elu``/``Selu``/``LeakyRelu``/``HardSigmoid`` read float32 attributes, so caramba
never uses those: exact GELU and erf in float64 use Cody's rational erf/erfc, float64
convolution is lowered to strided slices + one float64 MatMul (im2col), float64 average pooling
to a sum of strided slices, and the activations to Exp/Log/Where with float64 constants (see
``caramba.onnx.special``). No dtype is claimed that ORT would compute in a narrower type.
ORT's float64 ``Sin``/``Cos`` are up to ~1e5 ulps off, so float64 sin/cos use fdlibm's
Cody-Waite reduction (Payne-Hanek past |x| ~ 1.6e6) and kernel polynomials
(``special.sin``/``special.cos``: at most 0.751 ulp from mpmath, measured, for any finite x). ORT has no bfloat16 arithmetic on
CPU: bfloat16 is not claimed at all. The research ops (``fft.*``, ``vsa.*``, ``causal.*``,
``hawkes.*`` but ``simulate``) are lowered in ``research.py``, float64 and float32 only, and so
are ``predictive_coding.*`` (``caramba.onnx.export_predictive_coding``) and ``active_inference.*`` /
``markov_blanket.mutual_information`` without their VJP ops (``caramba.onnx.export_active_inference``).
"""

from __future__ import annotations

from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType

F = frozenset({DType.float64, DType.float32, DType.float16})
I64_32 = frozenset({DType.int64, DType.int32})
INTS = frozenset({DType.int64, DType.int32, DType.int8, DType.uint8})
SIGNED = F | {DType.int64, DType.int32, DType.int8}
NUM = F | INTS
BOOL = frozenset({DType.bool})
ANY = NUM | BOOL
KEY = frozenset({DType.int64})  # a table entry lists every dtype a node touches: int64 keys too
F64_32 = frozenset({DType.float64, DType.float32})

_TABLE: dict[str, frozenset[DType]] = {
    # plumbing: inputs, initializers, state as graph inputs/outputs
    "graph.input": ANY, "graph.constant": ANY, "state.read": ANY, "state.write": ANY,
    # math
    **dict.fromkeys(("math.add", "math.sub", "math.mul", "math.maximum", "math.minimum"), NUM),
    **dict.fromkeys(("math.div", "math.pow"), F),
    **dict.fromkeys(("math.neg", "math.abs", "math.sign", "math.square"), SIGNED),
    **dict.fromkeys(
        ("math.exp", "math.log", "math.log1p", "math.expm1", "math.sqrt", "math.rsqrt", "math.reciprocal",
         "math.tanh", "math.erf", "math.floor", "math.ceil", "math.round"), F),
    # float64 via special.sin/cos (ORT's own float64 Sin/Cos are far off)
    **dict.fromkeys(("math.sin", "math.cos"), F),
    **dict.fromkeys(("math.equal", "math.not_equal", "math.where"), ANY),
    **dict.fromkeys(("math.less", "math.less_equal", "math.greater", "math.greater_equal"), ANY),
    **dict.fromkeys(("math.logical_and", "math.logical_or", "math.logical_not"), BOOL),
    "math.clamp": NUM,
    "math.cast": ANY,
    # activation
    **dict.fromkeys(
        ("activation.relu", "activation.sigmoid", "activation.silu", "activation.gelu", "activation.leaky_relu",
         "activation.elu", "activation.selu", "activation.softplus", "activation.swiglu"), F),
    # linalg
    "linalg.matmul": F | I64_32, "linalg.outer": F | I64_32,
    # reduce
    "reduce.sum": NUM, "reduce.prod": NUM, "reduce.max": NUM, "reduce.min": NUM,
    "reduce.argmax": NUM, "reduce.argmin": NUM,
    "reduce.mean": F, "reduce.variance": F, "reduce.logsumexp": F,
    # shape
    **dict.fromkeys(
        ("shape.reshape", "shape.expand_dims", "shape.squeeze", "shape.transpose", "shape.concat", "shape.split",
         "shape.slice", "shape.pad", "shape.broadcast_to", "shape.gather", "shape.upsample_nearest",
         "shape.view_as_heads", "shape.merge_heads", "shape.last_token", "shape.flip"), ANY),
    "shape.scatter_add": NUM, "shape.iota": NUM,
    # nn
    **dict.fromkeys(
        ("nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.rms_norm", "nn.group_norm",
         "nn.conv1d", "nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d"), F),
    "nn.dropout": F | KEY,
    # random (SplitMix64 counters in uint64, values made in float64 and rounded once)
    "random.uniform": F | KEY, "random.normal": F | KEY, "random.bernoulli": BOOL | KEY,
    "nn.embedding": F | I64_32,
    # attention
    "attention.sdpa": F | BOOL, "attention.rope": F,
    # train (no checkpoint writer: host file I/O has no ONNX form)
    "train.loss.mse": F, "train.loss.bce": F,
    **dict.fromkeys(("train.loss.cross_entropy", "train.metric.accuracy", "train.metric.f1", "train.metric.perplexity"), F | I64_32),
    **dict.fromkeys(("train.optimizer.sgd", "train.optimizer.rmsprop", "train.optimizer.adagrad", "train.optimizer.lion"), F),
    **dict.fromkeys(("train.optimizer.adam", "train.optimizer.adamax", "train.optimizer.lamb"), F | KEY),
    # research families (lowered in research.py): float64 and float32 only
    **dict.fromkeys(("fft.rfft", "fft.irfft"), F64_32),
    **dict.fromkeys(("causal.backdoor_adjustment", "causal.frontdoor_adjustment", "causal.cate",
                     "causal.iv_estimate", "causal.dag_markov_factorization"), F64_32),
    # the SCM ops (and the VJP op, which covers them) read a bool intervention mask
    **dict.fromkeys(("causal.do_calculus", "causal.counterfactual", "causal.vjp"), F64_32 | BOOL),
    **dict.fromkeys(("hawkes.intensity", "hawkes.kernel_matrix", "hawkes.log_likelihood", "hawkes.vjp"), F64_32 | KEY),
    **dict.fromkeys(("vsa.bind", "vsa.bundle", "vsa.permute", "vsa.inverse_permute", "vsa.similarity"), F64_32),
    # predictive coding (lowered in export_predictive_coding.py, the VJP op included)
    **dict.fromkeys(("predictive_coding.prediction", "predictive_coding.prediction_error",
                     "predictive_coding.update_representation", "predictive_coding.update_weights",
                     "predictive_coding.vjp"), F64_32),
    # active inference and the mutual information (lowered in export_active_inference.py; no VJP ops);
    # expected_free_energy reads int64 policies
    **dict.fromkeys(("active_inference.belief_update", "active_inference.free_energy",
                     "active_inference.precision_weight", "markov_blanket.mutual_information"), F64_32),
    "active_inference.expected_free_energy": F64_32 | KEY,
}


def onnx_capabilities() -> Capabilities:
    from caramba.ir.opdef import all_ops

    known = all_ops()
    # Only ops that exist in this caramba's registry (others may not have landed yet).
    return Capabilities(ops={k: v for k, v in _TABLE.items() if k in known}, precision={"*": DType.float64})


TABLE = _TABLE
