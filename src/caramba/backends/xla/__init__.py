"""The xla backend: caramba graphs lowered to one JAX function, jit-compiled by XLA through PJRT.

``xla`` / ``xla:cpu`` runs on the PJRT CPU client built into jaxlib (location ``xla:cpu``);
``xla:cuda`` runs on a CUDA PJRT plugin found as configured (location ``xla:gpu``, see
``plugins.py``). float64 is enabled for caramba's own tracing, compiling and transfers only:
the user's global JAX configuration is never changed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from caramba.compute.buildinfo import BuildInfo
from caramba.compute.registry import Option
from caramba.errors import BackendUnavailable, CarambaError

OPTIONS = (
    Option("cpu", "flag", "run on the PJRT CPU client built into jaxlib (default)"),
    Option("cuda", "flag", "run on a CUDA PJRT plugin (location xla:gpu); see the xla_plugin_* settings"),
    Option("donate", "flag", "donate state buffers a graph overwrites (saves a copy; old state handles become invalid)"),
    Option("sync", "flag", "cpu: run each execution on the calling thread (a client of caramba's own): ~100 µs less "
                           "per call for tiny graphs, slower for graphs with independent parts (train steps)"),
)

INSTALL_HINT = "pip install 'caramba[xla]'  (jax and jaxlib)"


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("jax", "jaxlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def build_info() -> BuildInfo:
    """jax/jaxlib presence and versions and the CUDA plugin lookup, without importing jax."""
    missing = [m for m in ("jax", "jaxlib") if importlib.util.find_spec(m) is None]
    versions = _versions()
    if missing:
        return BuildInfo(
            "xla", False, reason=f"{' and '.join(missing)} not installed", versions=versions, install_hint=INSTALL_HINT
        )
    from caramba.backends.xla import plugins

    details = {"cpu": plugins.locate("cpu").describe()}
    try:
        details["cuda plugin"] = plugins.locate("cuda").describe()
    except CarambaError as exc:
        details["cuda plugin"] = f"misconfigured: {exc.message}"
    return BuildInfo("xla", True, location="xla:cpu", versions=versions, details=details)


def create(options: dict) -> "XlaRunner":  # noqa: F821
    if options.get("cpu") and options.get("cuda"):
        from caramba.errors import ConfigError

        raise ConfigError("backend xla takes one platform option: cpu or cuda")
    platform = "cuda" if options.get("cuda") else "cpu"
    if options.get("sync") and platform != "cpu":
        from caramba.errors import ConfigError

        raise ConfigError("backend xla: the sync option is for the cpu platform (xla:sync or xla:cpu,sync)")
    if platform == "cuda":
        from caramba.backends.xla import plugins

        choice = plugins.locate("cuda")
        if not choice.found:
            raise BackendUnavailable(
                f"backend 'xla:cuda' is not available here: {choice.describe()}",
                backend="xla:gpu",
                hint="install jax's CUDA plugin (pip install 'jax[cuda12]') or set xla_plugin_file: cuda=/path/plugin.so",
            )
    else:
        choice = None
    from caramba.backends.xla.runner import XlaRunner

    return XlaRunner(platform, plugin=choice, donate=options.get("donate", False), sync=options.get("sync", False))
