"""How each peer is prepared: resident inputs, compiled once, synchronous calls.

Peers get the same fairness caramba gets: inputs already on the device (jax.device_put,
torch tensors, ORT OrtValues with IO binding), compilation in the warm-up, and a call that
returns only once the result is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.harness import NotApplicable, Prepared


# ---- caramba ------------------------------------------------------------------------------
def caramba_train_prep(runner: Any, step: Any, state: dict[str, np.ndarray], batch: dict[str, np.ndarray],
                       note: str) -> Prepared:
    """A ``caramba.train.TrainStep`` timed as one executable over resident state (the loss comes
    back); its check runs two steps from ``state`` afresh and returns both losses."""
    from caramba.train import Trainer

    def fresh():
        trainer = Trainer(step, runner)
        for name in list(runner.state):
            del runner.state[name]
        for name, v in state.items():
            runner.state[name] = runner.upload(v)
        return trainer

    exe = fresh().executable(("loss",))
    tensors = {k: runner.upload(v) for k, v in batch.items()}

    def check():
        t = fresh()
        return np.array([t.step(tensors)["loss"], t.step(tensors)["loss"]])

    return Prepared(lambda: float(exe.run(tensors)["loss"].download()), check=check, note=note)


def caramba_prep(runner: Any, graph: Any, inputs: dict[str, np.ndarray], output: str = "out") -> Prepared:
    exe = runner.compile(graph)
    tensors = {k: runner.upload(v) for k, v in inputs.items() if k in exe.input_types}

    def run():
        outs = exe.run(tensors)
        for t in outs.values():
            t.wait()
        return outs

    return Prepared(run, fetch=lambda r: r[output].download())


# ---- JAX ----------------------------------------------------------------------------------
def jax_prep(fn: Callable[..., Any], args: Sequence[np.ndarray]) -> Prepared:
    import jax

    with jax.enable_x64(True):
        dev = [jax.device_put(a) for a in args]
        jf = jax.jit(fn)

    def run():
        return jax.block_until_ready(jf(*dev))

    return Prepared(run, fetch=lambda r: np.asarray(r), context=lambda: jax.enable_x64(True))


# ---- PyTorch (eager) ----------------------------------------------------------------------
def torch_two_losses(step: Callable[[Any], Any], state: Any) -> np.ndarray:
    """The losses of two eager PyTorch train steps from ``state`` (a train workload's check)."""
    return np.array([float(step(state).detach()), float(step(state).detach())])


def torch_train_prep(step: Callable[[Any], Any], fresh: Callable[[], Any], note: str) -> Prepared:
    """An eager PyTorch train step timed over one state; its check runs two steps afresh."""
    state = fresh()
    return Prepared(lambda: step(state), fetch=lambda r: np.asarray(float(r.detach())),
                    check=lambda: torch_two_losses(step, fresh()), note=note)



def torch_prep(fn: Callable[..., Any], args: Sequence[np.ndarray], grad: bool = False) -> Prepared:
    import torch

    ts = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]

    def run():
        return fn(*ts)

    ctx = (lambda: torch.enable_grad()) if grad else (lambda: torch.no_grad())
    return Prepared(run, fetch=lambda r: r.detach().numpy(), context=ctx)


# ---- ONNX Runtime -------------------------------------------------------------------------
_ONNX_TYPES = {np.dtype("float64"): 11, np.dtype("float32"): 1, np.dtype("int64"): 7}


def onnx_model(nodes: list, inputs: dict[str, np.ndarray], out_name: str, out_dtype: np.dtype, initializers: dict[str, np.ndarray] | None = None, opset: int = 20):
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info(k, _ONNX_TYPES[v.dtype], list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(out_name, _ONNX_TYPES[np.dtype(out_dtype)], None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def ort_prep(model: Any, inputs: dict[str, np.ndarray]) -> Prepared:
    import os

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # e.g. NOT_IMPLEMENTED: no float64 kernel
        raise NotApplicable(str(exc).split("\n")[0][:160]) from None
    binding = sess.io_binding()
    values = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
    for k, v in values.items():
        binding.bind_ortvalue_input(k, v)
    out = sess.get_outputs()[0].name
    binding.bind_output(out, "cpu")

    def run():
        sess.run_with_iobinding(binding)
        return binding

    return Prepared(run, fetch=lambda b: b.copy_outputs_to_cpu()[0])
