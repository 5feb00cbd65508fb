"""VJP rules, one module per op family, keyed by op ID.

A rule is a module-level function ``rule(c, *cts)``: ``c`` is the rule's context (the node,
its inputs ``c.x`` and outputs ``c.y`` as graph values, ``c.needs[i]`` whether input ``i``
needs a cotangent), ``cts`` one cotangent per output. It returns one cotangent per input, or
``None`` where none flows (integer indices, masks, unneeded inputs). Rules build cotangents from
ordinary IR ops, so gradients run on every backend that runs those ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Rule = Callable[..., "tuple[Any, ...]"]

RULES: dict[str, Rule] = {}


def rule(op_id: str) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the VJP rule of ``op_id``."""

    def deco(fn: Rule) -> Rule:
        if op_id in RULES:
            raise ValueError(f"VJP rule for {op_id} registered twice")
        RULES[op_id] = fn
        return fn

    return deco


def _load() -> None:
    from caramba.autodiff.rules import (  # fft, hawkes, vsa: the research families
        activation,
        active_inference,
        attention,
        causal,
        fft,
        hawkes,
        linalg,
        markov_blanket,
        math,
        nn,
        predictive_coding,
        reduce,
        shape,
        train,
        vsa,
    )


_load()
