"""PJRT plugin lookup for the xla backend, from caramba's settings. Imports no jax.

Order for an accelerator platform (``cuda``):

1. ``xla_plugin_file``: the platform's own plugin, ``platform=path`` entries, comma separated
   (``cuda=/opt/pjrt/pjrt_c_api_gpu_plugin.so``);
2. ``xla_shared_plugin_file``: one plugin file used for any platform;
3. ``xla_plugin_names`` (default: the platform's usual file names) searched in
   ``xla_library_dirs`` (``os.pathsep`` or comma separated), then ``$PJRT_PLUGIN_LIBRARY_PATH``,
   then the directories of installed JAX plugin packages (``jax_plugins.xla_cuda12`` ...).

The ``cpu`` platform is the PJRT CPU client built into jaxlib; it needs no plugin file, and a
``cpu=`` entry is a configuration error rather than something silently ignored.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from caramba.errors import ConfigError

PLATFORMS = ("cpu", "cuda")
DEFAULT_NAMES = {"cuda": ("xla_cuda_plugin.so", "pjrt_c_api_gpu_plugin.so", "libpjrt_c_api_gpu_plugin.so")}
# Installed JAX plugin packages per platform: JAX discovers and loads these itself.
PLUGIN_PACKAGES = {"cuda": ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")}


@dataclass(frozen=True)
class PluginChoice:
    """Where the plugin for ``platform`` comes from.

    ``path`` is the plugin file (None for the built-in cpu client or when nothing was found);
    ``source`` says which rule chose it; ``auto`` is True when the file belongs to an installed
    JAX plugin package, which JAX registers itself; ``searched`` lists what was looked at.
    """

    platform: str
    path: str | None
    source: str
    auto: bool = False
    searched: tuple[str, ...] = field(default=())

    @property
    def found(self) -> bool:
        return self.platform == "cpu" or self.path is not None

    def describe(self) -> str:
        if self.platform == "cpu":
            return "PJRT CPU client built into jaxlib"
        if self.path is None:
            return "no plugin found (searched " + (", ".join(self.searched) or "nothing") + ")"
        return f"{self.path} ({self.source})"


def _split(text: str, seps: str = ",") -> list[str]:
    for s in seps[1:]:
        text = text.replace(s, seps[0])
    return [p.strip() for p in text.split(seps[0]) if p.strip()]


def platform_files(text: str) -> dict[str, str]:
    """Parse ``xla_plugin_file``: ``platform=path`` entries, comma separated."""
    out: dict[str, str] = {}
    for entry in _split(text):
        platform, eq, path = entry.partition("=")
        platform = platform.strip()
        if not eq or not path.strip():
            raise ConfigError(
                f"xla_plugin_file entry {entry!r} must be platform=path (e.g. cuda=/path/pjrt_c_api_gpu_plugin.so)"
            )
        if platform not in PLATFORMS:
            raise ConfigError(f"xla_plugin_file names unknown platform {platform!r}; platforms: {', '.join(PLATFORMS)}")
        if platform == "cpu":
            raise ConfigError("xla_plugin_file: the cpu platform is the PJRT client built into jaxlib; it takes no plugin file")
        out[platform] = path.strip()
    return out


def _package_dirs(platform: str) -> list[tuple[str, str]]:
    dirs = []
    for pkg in PLUGIN_PACKAGES.get(platform, ()):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs.extend((d, pkg) for d in spec.submodule_search_locations)
    return dirs


def locate(platform: str, settings=None) -> PluginChoice:
    """Find the PJRT plugin for ``platform`` following the documented order."""
    if platform not in PLATFORMS:
        raise ConfigError(f"unknown xla platform {platform!r}; platforms: {', '.join(PLATFORMS)}")
    if settings is None:
        from caramba.config import settings as current

        settings = current()
    files = platform_files(settings.xla_plugin_file)
    if platform == "cpu":
        return PluginChoice("cpu", None, "built-in")
    searched: list[str] = []
    if platform in files:
        path = files[platform]
        if not Path(path).is_file():
            raise ConfigError(f"xla_plugin_file: {platform} plugin {path} does not exist")
        return PluginChoice(platform, path, f"xla_plugin_file {platform}=")
    if settings.xla_shared_plugin_file:
        path = settings.xla_shared_plugin_file
        if not Path(path).is_file():
            raise ConfigError(f"xla_shared_plugin_file {path} does not exist")
        return PluginChoice(platform, path, "xla_shared_plugin_file")
    names = _split(settings.xla_plugin_names) or list(DEFAULT_NAMES.get(platform, ()))
    dirs = [(d, "xla_library_dirs") for d in _split(settings.xla_library_dirs, "," + os.pathsep)]
    dirs += [(d, "PJRT_PLUGIN_LIBRARY_PATH") for d in _split(os.environ.get("PJRT_PLUGIN_LIBRARY_PATH", ""), "," + os.pathsep)]
    dirs += _package_dirs(platform)
    for d, origin in dirs:
        for name in names:
            candidate = Path(d) / name
            searched.append(str(candidate))
            if candidate.is_file():
                return PluginChoice(platform, str(candidate), f"{name} in {origin}", auto=origin.startswith("jax_plugins"), searched=tuple(searched))
    return PluginChoice(platform, None, "not found", searched=tuple(searched) or tuple(f"{n} (no library dirs)" for n in names))
