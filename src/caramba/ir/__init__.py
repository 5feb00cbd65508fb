"""caramba.ir: the typed, hardware-agnostic intermediate representation."""

from caramba.ir.attrs import REQUIRED, Attr, Attrs
from caramba.ir.codec import dumps, from_dict, loads, to_dict
from caramba.ir.dtypes import DType, dtype
from caramba.ir.graph import Graph, Node, Origin, Ref, StateDecl, Value, current_graph
from caramba.ir.opdef import OpDef, all_ops, get_op, having, register
from caramba.ir.printer import print_graph
from caramba.ir.trace import trace
from caramba.ir.types import Effect, ValueType
from caramba.ir.verify import verify

__all__ = [
    "REQUIRED", "Attr", "Attrs", "DType", "Effect", "Graph", "Node", "OpDef", "Origin", "Ref",
    "StateDecl", "Value", "ValueType", "all_ops", "current_graph", "dtype", "dumps", "from_dict",
    "get_op", "having", "loads", "print_graph", "register", "to_dict", "trace", "verify",
]
