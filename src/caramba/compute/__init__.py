"""caramba.compute: the backend contract (Tensor, Runner, Executable, Capabilities, BuildInfo)."""

from caramba.compute.buildinfo import BuildInfo
from caramba.compute.capabilities import Capabilities
from caramba.compute.registry import BACKENDS, Option, available, build_info, new, parse_spec
from caramba.compute.runner import Executable, Runner, StateStore
from caramba.compute.tensor import Location, Tensor

__all__ = [
    "BACKENDS", "BuildInfo", "Capabilities", "Executable", "Location", "Option", "Runner",
    "StateStore", "Tensor", "available", "build_info", "new", "parse_spec",
]
