"""Layers, MLX-style: ``__init__`` declares parameters, ``__call__`` builds the math.

Parameters are graph state named by where they sit in the module tree (``encoder.fc1.weight``);
``param.read()`` reads it in the graph being built. A module holds no values: those live in a
runner's state (``Trainer.init`` draws and uploads them), so the same model object builds the
train-step graph and any eval graph, and both see the same values on a runner.
"""

from __future__ import annotations

import contextvars
import itertools
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from caramba import ops
from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Value, current_graph
from caramba.ir.types import ValueType
from caramba.train import init as initializers

# The int64 step value a train-step graph is being built with (fresh dropout masks per step).
STEP_KEY: contextvars.ContextVar[Value | None] = contextvars.ContextVar("caramba_step_key", default=None)


class Parameter:
    """A trainable (or frozen) tensor of a module: shape, dtype and initializer."""

    def __init__(self, shape: Sequence[int], init: initializers.Initializer | None = None,
                 dtype: "DType | str" = DType.float64, *, trainable: bool = True) -> None:
        self.type = ValueType(tuple(shape), as_dtype(dtype))
        if not self.type.dtype.is_float:
            raise ConfigError(f"parameters are float tensors, got dtype {self.type.dtype}")
        self.init = init if init is not None else initializers.glorot_uniform()
        self.trainable = trainable
        self._owner: Module | None = None
        self._key = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def name(self) -> str:
        if self._owner is None:
            raise ConfigError("this parameter is not attached to a module, so it has no name")
        return _join(self._owner.path, self._key)

    def read(self) -> Value:
        """This parameter's value in the graph being built (declares the state on first use)."""
        return current_graph().variable(self.name, self.shape, self.dtype)

    def initial_value(self, seed: int):
        return self.init(initializers.generator(seed, self.name), self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"Parameter({self._key or '?'}: {self.type})"


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


class Module:
    """Base of every layer. Assigning a Parameter, a Module or a list of Modules to an attribute
    registers it under that name; ``parameters()`` lists them by hierarchical name."""

    def __init__(self, name: str = "") -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_key", name)
        object.__setattr__(self, "training", True)

    def __setattr__(self, key: str, value: Any) -> None:
        if "_children" not in self.__dict__:
            raise ConfigError(f"{type(self).__name__}.__init__ must call super().__init__() before setting attributes")
        if isinstance(value, Parameter):
            value._owner, value._key = self, key
            self._params[key] = value
        elif isinstance(value, Module):
            self._adopt(key, value)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, Module) for v in value):
            for i, v in enumerate(value):
                if isinstance(v, Module):
                    self._adopt(f"{key}.{i}", v)
        object.__setattr__(self, key, value)

    def _adopt(self, key: str, child: "Module") -> None:
        object.__setattr__(child, "_parent", self)
        object.__setattr__(child, "_key", key)
        self._children[key] = child

    @property
    def path(self) -> str:
        """Hierarchical name of this module (``""`` for an unnamed root)."""
        if self._parent is None:
            return self._key
        return _join(self._parent.path, self._key)

    def children(self) -> Iterator["Module"]:
        return iter(self._children.values())

    def parameters(self, trainable_only: bool = False) -> dict[str, Parameter]:
        """``{hierarchical name: Parameter}`` of this module and every child, in definition order."""
        out: dict[str, Parameter] = {}
        for p in self._params.values():
            if p.trainable or not trainable_only:
                out[p.name] = p
        for child in self._children.values():
            out.update(child.parameters(trainable_only))
        return out

    def initial_values(self, seed: int) -> dict[str, Any]:
        """Host arrays for every parameter, drawn from ``seed`` (see ``caramba.train.init``)."""
        return {name: p.initial_value(seed) for name, p in self.parameters().items()}

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (dropout active) on this module and its children."""
        object.__setattr__(self, "training", mode)
        for child in self._children.values():
            child.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define __call__")

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in {**self._params, **self._children}.items())
        return f"{type(self).__name__}({inner})"


class Linear(Module):
    """``y = x @ weight + bias`` with weight [in, out] (Glorot-uniform) and bias [out] (zeros)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 init: initializers.Initializer | None = None, dtype: "DType | str" = DType.float64) -> None:
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ConfigError(f"Linear needs positive sizes, got in_features={in_features}, out_features={out_features}")
        self.weight = Parameter((in_features, out_features), init or initializers.glorot_uniform(), dtype)
        if bias:
            self.bias = Parameter((out_features,), initializers.zeros(), dtype)
        self.has_bias = bias

    def __call__(self, x: Value) -> Value:
        y = x @ self.weight.read()
        return y + self.bias.read() if self.has_bias else y


class Sequential(Module):
    """Apply layers in order; a layer is a Module or any callable on one value (``ops.relu``)."""

    def __init__(self, *layers: Callable[[Value], Value]) -> None:
        super().__init__()
        self.layers = list(layers)

    def __call__(self, x: Value) -> Value:
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Sequential):
    """Linear layers of ``sizes`` (``[in, hidden..., out]``) with ``activation`` between them."""

    def __init__(self, sizes: Sequence[int], activation: Callable[[Value], Value] = ops.relu, *,
                 init: initializers.Initializer | None = None, dtype: "DType | str" = DType.float64) -> None:
        if len(sizes) < 2:
            raise ConfigError(f"MLP needs at least [in, out] sizes, got {list(sizes)}")
        layers: list[Any] = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(Linear(a, b, init=init, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(activation)
        super().__init__(*layers)


class Dropout(Module):
    """Zero elements with probability ``rate`` while training (scaled by ``1/(1-rate)``).

    The mask is a function of ``seed`` (default: from the layer's name) and the step counter of
    the train step being built, so every step draws a fresh mask and a resumed run redraws the
    same ones. In eval mode, the identity.
    """

    def __init__(self, rate: float = 0.5, seed: int | None = None) -> None:
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"Dropout rate must be in [0, 1), got {rate}")
        self.rate, self.seed = rate, seed

    def __call__(self, x: Value) -> Value:
        if not self.training or self.rate == 0.0:
            return x
        seed = self.seed if self.seed is not None else zlib.crc32(self.path.encode())
        key = STEP_KEY.get()
        return ops.dropout(x, key, rate=self.rate, seed=seed)


class LayerNorm(Module):
    """Layer normalization over the last axis with learned scale (ones) and shift (zeros)."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = True, dtype: "DType | str" = DType.float64) -> None:
        super().__init__()
        self.eps, self.affine = eps, affine
        if affine:
            self.weight = Parameter((dims,), initializers.ones(), dtype)
            self.bias = Parameter((dims,), initializers.zeros(), dtype)

    def __call__(self, x: Value) -> Value:
        if self.affine:
            return ops.layer_norm(x, self.weight.read(), self.bias.read(), eps=self.eps)
        return ops.layer_norm(x, eps=self.eps)


class Embedding(Module):
    """``table[ids]`` with table [vocab, dims] drawn from N(0, 1)."""

    def __init__(self, vocab: int, dims: int, dtype: "DType | str" = DType.float64) -> None:
        super().__init__()
        self.weight = Parameter((vocab, dims), initializers.normal(), dtype)

    def __call__(self, ids: Value) -> Value:
        return ops.embedding(ids, self.weight.read())


__all__ = ["STEP_KEY", "MLP", "Dropout", "Embedding", "LayerNorm", "Linear", "Module", "Parameter", "Sequential"]
