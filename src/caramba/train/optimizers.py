"""Optimizers, MLX-style: ``init_single`` declares a parameter's slots, ``apply_single`` emits
its update. Each update is one ``train.optimizer.<name>`` op (a fused pass on the cpu backend),
or, with ``fused=False``, the same update rule spelled out in primitive IR ops (math.*,
reduce.*), which runs on any backend that runs those ops. The choice is explicit: a backend
that lacks the fused op refuses the graph, it is never rewritten behind your back.

Slots are graph state named ``opt.<optimizer>.<slot>.<parameter>`` (zeros-initialized on the
device), the step counter is ``opt.step``. ``Optimizer.update`` wires the whole update into a
train-step graph: learning rate from the schedule, optional global-norm clipping, one update
op per parameter and the state writes.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from caramba import ops
from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Origin, Value, origin_scope
from caramba.ops import train as rules
from caramba.train.clip import clip_by_global_norm, sum_of_squares
from caramba.train.schedules import Schedule, as_schedule

STEP = "opt.step"


def _number(name: str, v: Any, lo: float = 0.0, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{name} must be a finite number, got {v!r}")
    v = float(v)
    if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
        lo_s = f"{'(' if lo_open else '['}{lo:g}"
        hi_s = f"{hi:g}{')' if hi_open else ']'}"
        raise ConfigError(f"{name} must be in {lo_s}, {hi_s}, got {v!r}")
    return v


def _betas(betas: Any) -> tuple[float, float]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ConfigError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    return (_number("beta1", betas[0], 0.0, 1.0, hi_open=True), _number("beta2", betas[1], 0.0, 1.0, hi_open=True))


class _GraphMath:
    """What the update rules call ``np``, bound to IR ops (for decomposed updates)."""

    sqrt = staticmethod(ops.sqrt)
    abs = staticmethod(ops.abs)
    maximum = staticmethod(ops.maximum)
    sign = staticmethod(ops.sign)


_GRAPH_RULES: dict[str, Callable[..., Any]] = {}


def graph_rule(rule: Callable[..., Any]) -> Callable[..., Any]:
    """``rule`` (an update rule of ``caramba.ops.train``) evaluated on graph values."""
    fn = _GRAPH_RULES.get(rule.__name__)
    if fn is None:
        fn = types.FunctionType(rule.__code__, {**rule.__globals__, "np": _GraphMath}, rule.__name__, rule.__defaults__)
        _GRAPH_RULES[rule.__name__] = fn
    return fn


def _bias(beta: float, t: Value) -> Value:
    """``1 - beta**t`` for the step value ``t`` (already cast to the parameter dtype)."""
    return 1.0 - ops.pow(t.graph.constant(np.asarray(beta, dtype=t.dtype.numpy)), t)


class Optimizer:
    """Base class. Subclasses set ``name`` (the op is ``train.optimizer.<name>``), ``slots``,
    ``uses_step`` and implement ``attrs()``.

    ``learning_rate`` is a positive float or a ``Schedule``; ``clip_norm`` (optional) scales
    all gradients by ``min(1, clip_norm / (global_norm + 1e-6))`` before the update; ``fused``
    (default) emits one ``train.optimizer.*`` op per parameter, ``fused=False`` the same rule in
    primitive ops. Subclasses implement ``decomposed`` with their update rule.
    """

    name = ""
    slots: tuple[str, ...] = ()
    uses_step = False

    def __init__(self, learning_rate: "float | Schedule", clip_norm: float | None = None, *, fused: bool = True) -> None:
        if not isinstance(learning_rate, Schedule):
            _number("learning_rate", learning_rate, 0.0, lo_open=True)
        self.schedule = as_schedule(learning_rate)
        self.clip_norm = None if clip_norm is None else _number("clip_norm", clip_norm, 0.0, lo_open=True)
        if not isinstance(fused, bool):
            raise ConfigError(f"fused must be true or false, got {fused!r}")
        self.fused = fused
        # where the parts of the update were asked for ("schedule", "clip", "update"): the nodes
        # they emit carry it, so an error about one names that manifest line
        self.origins: dict[str, Origin] = {}

    @property
    def op(self) -> str:
        return f"train.optimizer.{self.name}"

    def attrs(self) -> dict[str, Any]:
        return {}

    def slot_names(self) -> tuple[str, ...]:
        return self.slots

    def state_name(self, slot: str, param: str) -> str:
        return f"opt.{self.name}.{slot}.{param}"

    # ---- MLX-style per-parameter hooks --------------------------------------------------

    def init_single(self, graph: Graph, param: str, like: Value) -> dict[str, Value]:
        """Declare the slots of ``param`` (zeros) and return their current values."""
        return {s: graph.variable(self.state_name(s, param), like.shape, like.dtype, init="zeros") for s in self.slot_names()}

    def apply_single(self, gradient: Value, parameter: Value, state: Mapping[str, Value], *, lr: Value,
                     grad_scale: Value, step: Value) -> tuple[Value, dict[str, Value]]:
        """The updated parameter and slots (one ``train.optimizer.*`` node, or primitive ops)."""
        g = parameter.graph
        slots = [state[s] for s in self.slot_names()]
        if self.fused:
            ins = [parameter, gradient, lr, grad_scale] + ([step] if self.uses_step else []) + slots
            out = g.call(self.op, ins, self.attrs())
            out = out if isinstance(out, tuple) else (out,)
        else:
            t = ops.cast(step, dtype=parameter.dtype) if self.uses_step else None
            out = self.decomposed(parameter, gradient, slots, lr, grad_scale, t)
        return out[0], dict(zip(self.slot_names(), out[1:], strict=True))

    def decomposed(self, p: Value, g: Value, slots: list[Value], lr: Value, gs: Value, t: Value | None) -> tuple[Value, ...]:
        """``(p', *slots')`` in primitive ops; ``t`` is the step as a float value (or None)."""
        raise NotImplementedError

    # ---- the whole update -------------------------------------------------------------

    def update(self, graph: Graph, params: Mapping[str, Value], grads: Mapping[str, Value], step: Value) -> dict[str, Value]:
        """Emit the update of every parameter (reads ``params``, gradients ``grads``) and the
        state writes; ``step`` is the int64 count including this update. Returns the scalars a
        train step may report: ``lr`` and, when clipping, ``grad_norm``."""
        report: dict[str, Value] = {}
        by_dtype: dict[DType, Value] = {}
        scale: Value | None = None
        at = self.origins.get
        if self.clip_norm is not None and grads:
            with origin_scope(at("clip")):
                scale, norm = clip_by_global_norm(list(grads.values()), self.clip_norm)
            report["grad_norm"] = norm
        for name, p in params.items():
            d = p.dtype
            if d not in by_dtype:
                with origin_scope(at("schedule")):
                    by_dtype[d] = self.schedule(step, d)
            lr = by_dtype[d]
            with origin_scope(at("update")):
                gs = graph.constant(np.ones((), dtype=d.numpy)) if scale is None else (scale if scale.dtype == d else ops.cast(scale, dtype=d))
                new_p, new_slots = self.apply_single(grads[name], p, self.init_single(graph, name, p), lr=lr, grad_scale=gs,
                                                     step=step)
            graph.write(name, new_p)
            for s, v in new_slots.items():
                graph.write(self.state_name(s, name), v)
        if by_dtype:
            report["lr"] = next(iter(by_dtype.values()))
        return report

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs().items())
        return f"{type(self).__name__}(lr={self.schedule!r}{', ' + attrs if attrs else ''})"


class SGD(Optimizer):
    """``g = grad + wd*p``; with momentum ``b = momentum*b + (1-dampening)*g`` and
    ``d = g + momentum*b`` (Nesterov) or ``b``; ``p -= lr*d``. Defaults: no momentum, no decay."""

    name = "sgd"

    def __init__(self, learning_rate, momentum: float = 0.0, weight_decay: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.momentum = _number("momentum", momentum, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)
        self.dampening = _number("dampening", dampening, 0.0, 1.0)
        if not isinstance(nesterov, bool):
            raise ConfigError(f"nesterov must be true or false, got {nesterov!r}")
        if nesterov and (self.momentum == 0.0 or self.dampening != 0.0):
            raise ConfigError(f"nesterov needs momentum > 0 and dampening = 0, got momentum={momentum}, dampening={dampening}")
        self.nesterov = nesterov

    def slot_names(self):
        return ("buf",) if self.momentum else ()

    def attrs(self):
        return {"momentum": self.momentum, "dampening": self.dampening, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        buf = slots[0] if slots else p  # unused without momentum
        out = graph_rule(rules.sgd_elem)(p, g, buf, lr, gs, self.momentum, self.dampening, self.nesterov, self.weight_decay)
        return out if self.momentum else out[:1]


class Adam(Optimizer):
    """``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g²``,
    ``p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)`` with ``g = grad + wd*p`` (L2 decay).
    Defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0."""

    name = "adam"
    slots = ("m", "v")
    uses_step = True
    decoupled = False

    def __init__(self, learning_rate, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.betas = _betas(betas)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def attrs(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "eps": self.eps,
                "weight_decay": self.weight_decay, "decoupled": self.decoupled}

    def decomposed(self, p, g, slots, lr, gs, t):
        b1, b2 = self.betas
        return graph_rule(rules.adam_elem)(p, g, *slots, lr, gs, b1, b2, self.eps, self.weight_decay, self.decoupled,
                                           lr / _bias(b1, t), ops.sqrt(_bias(b2, t)))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr*wd`` before the Adam step (default wd 0.01)."""

    decoupled = True

    def __init__(self, learning_rate, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01,
                 clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, betas, eps, weight_decay, clip_norm, fused=fused)


class Adamax(Optimizer):
    """``m = b1*m + (1-b1)*g``, ``u = max(b2*u, |g| + eps)``, ``p -= lr/(1-b1^t) * m/u``.
    Defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0."""

    name = "adamax"
    slots = ("m", "u")
    uses_step = True

    def __init__(self, learning_rate, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.betas = _betas(betas)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def attrs(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "eps": self.eps, "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        b1, b2 = self.betas
        return graph_rule(rules.adamax_elem)(p, g, *slots, gs, b1, b2, self.eps, self.weight_decay, lr / _bias(b1, t))


class RMSprop(Optimizer):
    """``v = alpha*v + (1-alpha)*g²``, ``d = g/(sqrt(v) + eps)``; with momentum
    ``b = momentum*b + d``, ``p -= lr*b``, else ``p -= lr*d``. Defaults: alpha 0.99, eps 1e-8."""

    name = "rmsprop"

    def __init__(self, learning_rate, alpha: float = 0.99, eps: float = 1e-8, momentum: float = 0.0,
                 weight_decay: float = 0.0, clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.alpha = _number("alpha", alpha, 0.0, 1.0, hi_open=True)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        self.momentum = _number("momentum", momentum, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def slot_names(self):
        return ("v", "buf") if self.momentum else ("v",)

    def attrs(self):
        return {"alpha": self.alpha, "eps": self.eps, "momentum": self.momentum, "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        v, buf = slots[0], slots[1] if self.momentum else p
        out = graph_rule(rules.rmsprop_elem)(p, g, v, buf, lr, gs, self.alpha, self.eps, self.momentum, self.weight_decay)
        return out if self.momentum else out[:2]


class Adagrad(Optimizer):
    """``s += g²``, ``p -= lr * g/(sqrt(s) + eps)``. Defaults: eps 1e-10, weight_decay 0."""

    name = "adagrad"
    slots = ("s",)

    def __init__(self, learning_rate, eps: float = 1e-10, weight_decay: float = 0.0, clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def attrs(self):
        return {"eps": self.eps, "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        return graph_rule(rules.adagrad_elem)(p, g, *slots, lr, gs, self.eps, self.weight_decay)


class Lion(Optimizer):
    """``c = b1*m + (1-b1)*g``, ``p = p*(1 - lr*wd) - lr*sign(c)``, ``m = b2*m + (1-b2)*g``.
    Defaults: betas (0.9, 0.99), weight_decay 0."""

    name = "lion"
    slots = ("m",)

    def __init__(self, learning_rate, betas=(0.9, 0.99), weight_decay: float = 0.0, clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.betas = _betas(betas)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def attrs(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        b1, b2 = self.betas
        return graph_rule(rules.lion_elem)(p, g, *slots, lr, gs, b1, b2, self.weight_decay)


class Lamb(Optimizer):
    """Adam moments, ``r = m̂/(sqrt(v̂) + eps) + wd*p``, ``p -= lr * (|p|/|r|) * r`` (trust ratio 1
    when either norm is 0). Defaults: betas (0.9, 0.999), eps 1e-6, weight_decay 0."""

    name = "lamb"
    slots = ("m", "v")
    uses_step = True

    def __init__(self, learning_rate, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 clip_norm: float | None = None, *, fused: bool = True) -> None:
        super().__init__(learning_rate, clip_norm, fused=fused)
        self.betas = _betas(betas)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def attrs(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "eps": self.eps, "weight_decay": self.weight_decay}

    def decomposed(self, p, g, slots, lr, gs, t):
        b1, b2 = self.betas
        r, m, v = graph_rule(rules.lamb_dir_elem)(p, g, *slots, gs, b1, b2, self.eps, self.weight_decay, _bias(b1, t), _bias(b2, t))
        pn, rn = ops.sqrt(sum_of_squares(p)), ops.sqrt(sum_of_squares(r))
        zero = p.graph.constant(np.zeros((), dtype=p.dtype.numpy))
        both = ops.logical_and(ops.greater(pn, zero), ops.greater(rn, zero))
        trust = ops.where(both, pn / rn, p.graph.constant(np.ones((), dtype=p.dtype.numpy)))
        return p - (lr * trust) * r, m, v


OPTIMIZERS: dict[str, type[Optimizer]] = {
    "sgd": SGD, "adam": Adam, "adamw": AdamW, "adamax": Adamax, "rmsprop": RMSprop, "adagrad": Adagrad,
    "lion": Lion, "lamb": Lamb,
}

__all__ = ["OPTIMIZERS", "STEP", "SGD", "Adagrad", "Adam", "AdamW", "Adamax", "Lamb", "Lion", "Optimizer", "RMSprop"]
