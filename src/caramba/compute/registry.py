"""Backend registry and selection: ``caramba.compute.new("cpu:threads=2")``.

Config strings split at the first ``:`` into a backend name and comma-separated options
(``key`` or ``key=value``). Unknown names and options are errors that list the valid ones; an
unavailable backend raises BackendUnavailable with its build info and is never replaced.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from caramba.errors import BackendUnavailable, ConfigError, did_you_mean

if TYPE_CHECKING:
    from caramba.compute.buildinfo import BuildInfo
    from caramba.compute.runner import Runner


MAX_THREADS = 1024  # a thread-count option above this is a typo (or an attack), not a machine


@dataclass(frozen=True)
class Option:
    """A backend option: ``kind`` is ``flag`` (no value), ``int``, ``float`` or ``str``."""

    name: str
    kind: str
    doc: str = ""
    choices: tuple[str, ...] | None = None
    maximum: int | None = None  # for ints: the largest value that makes sense (thread counts)

    def parse(self, raw: str | None, backend: str) -> Any:
        if self.kind == "flag":
            if raw is not None:
                raise ConfigError(f"backend option '{self.name}' of {backend} takes no value")
            return True
        if raw is None:
            raise ConfigError(f"backend option '{self.name}' of {backend} needs a value ({self.kind})")
        try:
            value: Any = {"int": int, "float": float, "str": str}[self.kind](raw)
        except ValueError:
            raise ConfigError(f"backend option {self.name}={raw!r} of {backend}: expected {self.kind}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"backend option {self.name}={raw!r} of {backend}: one of {', '.join(self.choices)}")
        if self.kind == "int" and value <= 0:
            raise ConfigError(f"backend option {self.name}={raw!r} of {backend} must be positive")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"backend option {self.name}={raw!r} of {backend} is above its limit {self.maximum}")
        return value


# name -> module that defines OPTIONS, build_info() and create(options). Adding a backend is
# adding a line here and a package under caramba/backends/.
BACKENDS: dict[str, str] = {
    "cpu": "caramba.backends.cpu",
    "xla": "caramba.backends.xla",
    "onnx": "caramba.backends.onnx",
    "webgpu": "caramba.backends.webgpu",
    "cuda": "caramba.backends.cuda",
}


def _module(name: str) -> ModuleType:
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend '{name}'; {did_you_mean(name, BACKENDS)}")
    return importlib.import_module(BACKENDS[name])


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"cpu:threads=2"`` -> ``("cpu", {"threads": 2})``, validating names and values."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty backend spec; " + did_you_mean("", BACKENDS))
    name, _, rest = spec.partition(":")
    mod = _module(name)
    known: dict[str, Option] = {o.name: o for o in mod.OPTIONS}
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = part.partition("=")
        if key not in known:
            valid = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"unknown option '{key}' for backend {name}; valid options: {valid}")
        if key in options:
            raise ConfigError(f"backend option '{key}' given twice in {spec!r}")
        options[key] = known[key].parse(raw if eq else None, name)
    return name, options


def build_info(name: str) -> "BuildInfo":
    return _module(name).build_info()


def available() -> list[str]:
    return [n for n in BACKENDS if build_info(n).available]


def default_spec() -> str:
    from caramba.config import settings

    return os.environ.get("CARAMBA_BACKEND") or settings().backend


def require(spec: str) -> tuple[str, dict[str, Any]]:
    """``parse_spec(spec)`` for a backend that can run here, else BackendUnavailable with its
    build info: what a run checks before anything is recorded or compiled."""
    name, options = parse_spec(spec)
    info = build_info(name)
    if not info.available:
        raise BackendUnavailable(
            f"backend '{name}' is not available here: {info.reason}",
            backend=name,
            hint=info.install_hint,
        )
    return name, options


def new(spec: str | None = None) -> "Runner":
    """Create a runner from a config string (default: ``CARAMBA_BACKEND`` or the config)."""
    name, options = require(spec if spec is not None else default_spec())
    return _module(name).create(options)
