"""The cost model: estimated flops and bytes moved per node, next to the ops it prices.

The compiler's ``schedule`` pass annotates nodes with these costs; backends use them to tell a
small graph from a large one (BLAS threads, XLA's optimization level, ONNX Runtime's threads).
An op family whose cost the generic rules below misjudge registers its own with
``register_cost(op_id, fn)`` beside its definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from caramba.ir.graph import Graph, Node
from caramba.ir.opdef import get_op


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: int


def matmul_flops(a: tuple[int, ...], out: tuple[int, ...]) -> int:
    """2*M*N*K over the batch of ``a @ b -> out`` (rank-1 operands included)."""
    k = a[-1] if a else 1
    return 2 * prod(out) * k


def elementwise_flops(op: str) -> int:
    """Flops per output element of an elementwise op (transcendentals cost more than an add)."""
    return _HEAVY.get(op, 1)


def graph_flops(graph: Graph) -> int:
    """The whole graph's estimated flops: what backends use to tell a small graph from a large one."""
    return sum(node_cost(graph, n).flops for n in graph.nodes)


# Flops per output element of elementwise ops beyond one (transcendentals cost more).
_HEAVY = {
    "math.exp": 8, "math.log": 8, "math.log1p": 8, "math.expm1": 8, "math.pow": 16, "math.sin": 8,
    "math.cos": 8, "math.tanh": 8, "math.erf": 8, "activation.gelu": 12, "activation.silu": 10,
    "activation.sigmoid": 10, "activation.selu": 10, "activation.elu": 10, "activation.softplus": 16,
}

# op ID -> (node's input types, node) -> flops: families whose cost the generic rules misjudge
FLOPS: dict[str, Callable[[list, Node], int]] = {}


def register_cost(op_id: str, flops: Callable[[list, Node], int]) -> None:
    """Price ``op_id`` by ``flops(input types, node)`` (bytes moved are always its inputs and outputs)."""
    FLOPS[op_id] = flops


def node_cost(graph: Graph, node: Node) -> Cost:
    """Estimated flops and bytes read + written by ``node``."""
    if node.op in ("graph.input", "graph.constant", "state.read", "state.write"):
        return Cost(0, 0)
    ins = [graph.type_of(r) for r in node.inputs]
    moved = sum(t.nbytes for t in ins) + sum(t.nbytes for t in node.types)
    out = node.types[0].size if node.types else 0
    op = node.op
    if op in FLOPS:
        flops = FLOPS[op](ins, node)
    elif op in ("linalg.matmul", "fused.linear"):
        flops = matmul_flops(ins[0].shape, node.types[0].shape) + (out * 8 if op == "fused.linear" else 0)
    elif op == "fused.elementwise":
        from caramba.ops.fused import decode_expr

        expr = decode_expr(node.attrs["expr"])
        width = max((t.size for t in ins), default=out)
        flops = width * sum(_HEAVY.get(s.op, 1) for s in expr.steps if s.op != "graph.constant")
    elif op in ("fused.softmax", "nn.softmax", "nn.log_softmax"):
        flops = out * 12
    elif op in ("fused.layer_norm_residual", "nn.layer_norm", "nn.rms_norm", "nn.group_norm"):
        flops = out * 8
    elif op in ("fused.layer_norm_grad", "fused.rms_norm_grad"):
        flops = ins[0].size * 12  # statistics, two sums, dx (and the dgamma/dbeta sums)
    elif op in ("fused.softmax_grad", "fused.log_softmax_grad"):
        flops = out * (4 if op == "fused.softmax_grad" else 11)  # log_softmax: exp(y) per element
    elif op in ("nn.conv1d", "nn.conv2d"):
        w = ins[1].shape
        flops = 2 * out * prod(w[1:])
    elif op == "attention.sdpa":
        q, k, v = ins[:3]
        flops = 2 * prod(q.shape) * k.shape[-2] + 2 * prod(q.shape[:-1]) * k.shape[-2] * v.shape[-1]
    elif "reduction" in get_op(op).traits:
        flops = ins[0].size
    else:
        flops = out * _HEAVY.get(op, 1)
    return Cost(int(flops), int(moved))
