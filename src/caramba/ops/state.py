"""Resident state: ``state.read`` / ``state.write`` of state declared in ``Graph.state``.

Reads and writes keep program order (their effects); a read after a write in the same graph
sees the written value.
"""

from __future__ import annotations

from caramba.ir.attrs import Attr
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define

read = define(
    "state.read",
    lambda ins, a: (ValueType(a["shape"], a["dtype"]),),
    0,
    (Attr("name", "str"), Attr("shape", "ints"), Attr("dtype", "dtype")),
    effect=Effect.state_read,
    differentiable=False,
    doc="Current value of the named state.",
)

write = define(
    "state.write",
    lambda ins, a: (),
    1,
    (Attr("name", "str"),),
    effect=Effect.state_write,
    differentiable=False,
    doc="Replace the named state with the input (no outputs).",
)
