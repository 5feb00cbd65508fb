"""The onnx lowerings of predictive_coding.* (caramba.onnx.export_predictive_coding): every op and
every VJP, each activation, float64 and float32, with no, one and two leading batch axes, equal
to the cpu backend on random inputs (the values themselves are checked against loop references
in tests/compliance/specs/predictive_coding.py); float16 is refused at compile time."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from caramba.errors import UnsupportedOperation

from .onnx_helpers import call_graph, run

K, N = 5, 7
ACTS = ("linear", "tanh", "sigmoid", "relu")
LEADS = ((), (6,), (2, 3))


def graph(op, shapes, dtype, attrs, n_out):
    return call_graph(op, [(s, dtype) for s in shapes], attrs, n_out)


def shapes_of(of, lead, pi_rank=2):
    """(input shapes of the op ``of``, its output shapes)."""
    r, x, w, b = lead + (K,), lead + (N,), (K, N), (N,)
    return {
        "prediction": ([r, w, b], [x]),
        "prediction_error": ([x, x, [(), (N,), (N, N)][pi_rank]], [x]),
        "update_representation": ([r, w, b, x, r], [r]),
        "update_weights": ([r, w, b, x], [w, b]),
    }[of]


def compare(backends, op, shapes, dtype, attrs, n_out, seed):
    ox, cpu = backends
    rng = np.random.default_rng(seed)
    inputs = {f"x{i}": rng.uniform(-1.5, 1.5, s).astype(dtype) for i, s in enumerate(shapes)}
    g = graph(op, shapes, dtype, attrs, n_out)
    got, want = run(ox, g, inputs), run(cpu, g, inputs)
    eps = np.finfo(dtype).eps
    assert set(got) == set(want) == {f"o{i}" for i in range(n_out)}
    for k in want:
        assert got[k].dtype == want[k].dtype == np.dtype(dtype) and got[k].shape == want[k].shape
        scale = max(1.0, float(np.max(np.abs(want[k]), initial=0.0)))
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=64 * eps * scale, err_msg=f"{op} {attrs} {k}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("act", ACTS)
def test_ops_and_vjps_equal_cpu(backends, dtype, lead, act):
    for i, of in enumerate(("prediction", "update_representation", "update_weights")):
        attrs = {"activation": act} | ({"lr": 0.3} if of != "prediction" else {})
        ins, outs = shapes_of(of, lead)
        compare(backends, f"predictive_coding.{of}", ins, dtype, attrs, len(outs), seed=i)
        compare(backends, "predictive_coding.vjp", outs + ins, dtype, {"of": of, **attrs}, len(ins), seed=10 + i)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("pi_rank", [0, 1, 2])
def test_prediction_error_and_vjp_equal_cpu(backends, dtype, lead, pi_rank):
    ins, outs = shapes_of("prediction_error", lead, pi_rank)
    compare(backends, "predictive_coding.prediction_error", ins, dtype, {}, 1, seed=pi_rank)
    compare(backends, "predictive_coding.vjp", outs + ins, dtype, {"of": "prediction_error"}, 3, seed=pi_rank + 3)


def test_no_matmul_takes_a_1d_operand(backends):
    """ORT 1.32 miscomputes MatMul(Transpose(A), v) with a 1-D v: the rules keep MatMuls 2-D."""
    import onnx

    from caramba.onnx.export import ORT_CPU, export_graph

    for of in ("prediction", "update_representation", "update_weights"):
        ins, outs = shapes_of(of, ())
        attrs = {"of": of, "activation": "tanh"} | ({"lr": 0.3} if of != "prediction" else {})
        g = graph("predictive_coding.vjp", outs + ins, "float64", attrs, len(ins))
        model = export_graph(g, ORT_CPU).model
        inferred = onnx.shape_inference.infer_shapes(model)
        ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*inferred.graph.value_info, *model.graph.input)}
        ranks |= {t.name: len(t.dims) for t in model.graph.initializer}
        matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
        assert matmuls and all(ranks[x] == 2 for n in matmuls for x in n.input), of


def test_float16_is_refused(backends):
    ox, _ = backends
    with pytest.raises(UnsupportedOperation, match="predictive_coding.prediction on onnx:cpu does not take float16"):
        ox.compile(graph("predictive_coding.prediction", [(2, K), (K, N), (N,)], "float16", {"activation": "tanh"}, 1))
