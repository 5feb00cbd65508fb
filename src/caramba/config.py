"""Settings: defaults < config file < CARAMBA_* environment variables < flags.

The config file is the first of ``--config``, ``./caramba.yml``, ``~/.caramba/config.yml``.
``caramba config show`` prints every setting and where its value came from.

``assets`` lists folders of the user's own assets (docs/manifest.md, "Your own assets"): in the
config file a list (or an os.pathsep-separated string) of folders, relative ones taken from the
file's folder. ``CARAMBA_ASSET_PATH`` adds more folders (it does not replace these). An unknown
``CARAMBA_*`` environment variable is reported once with a did-you-mean (a typo would otherwise
be ignored silently).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from caramba.errors import ConfigError, did_you_mean


@dataclass
class Settings:
    backend: str = "cpu"
    store: str = field(default_factory=lambda: str(Path.home() / ".caramba" / "store"))
    cache_dir: str = field(default_factory=lambda: str(Path.home() / ".caramba" / "cache"))
    serve_host: str = "127.0.0.1"
    serve_port: int = 8765
    api_token: str = ""
    # caramba serve: who may address it, what submitted manifests may read, what checking one may cost
    serve_allowed_hosts: str = ""  # Host names besides the bound address and loopback (comma-separated; * = any)
    serve_allowed_origins: str = ""  # browser origins besides the server's own (comma-separated scheme://host:port)
    serve_data_roots: str = ""  # folders submitted manifests may read data from (os.pathsep-separated)
    serve_validate_timeout_s: float = 20.0  # wall-clock limit to validate or plan one submitted manifest
    serve_validate_memory_mb: int = 2048  # address space the validating worker may add to its baseline (0: no cap)
    serve_generate_memory_mb: float = 4096.0  # weights + KV caches one /generate may hold (0: no cap)
    # PJRT plugin lookup for the xla backend (platform file, shared file, names in lib dirs)
    xla_plugin_file: str = ""
    xla_shared_plugin_file: str = ""
    xla_plugin_names: str = ""
    xla_library_dirs: str = ""
    # folders of the user's own assets (os.pathsep-separated; caramba.yml takes a list), see caramba.manifest.registry
    assets: str = ""
    # caramba.store.vectors: a folder (Qdrant local mode) or http(s)://host:6333; default <store>/vectors
    vectors: str = ""
    # secondary indexes of the run store (caramba store reindex|search|lineage): "" = the embedded stand-ins
    search_url: str = ""  # Elasticsearch, e.g. http://localhost:9200
    lineage_uri: str = ""  # Neo4j bolt URI, e.g. bolt://neo4j:password@localhost:7687
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)


_FIELDS = {f.name: f for f in fields(Settings) if f.name != "sources"}
_CACHE: dict[str, Settings] = {}
# CARAMBA_* variables read outside the settings (and by the project's own test harness)
OTHER_ENV = frozenset({
    "CARAMBA_ASSET_PATH", "CARAMBA_SANDBOX_SELFTEST", "CARAMBA_COMPLIANCE_BACKENDS", "CARAMBA_COMPLIANCE_BATCH",
    "CARAMBA_CONFORMANCE_BACKENDS", "CARAMBA_CHROMIUM", "CARAMBA_NETNS_RUN", "CARAMBA_PROBE_SECRET",
    "CARAMBA_TEST_QDRANT_URL",
    "CARAMBA_TEST_ELASTICSEARCH_URL", "CARAMBA_TEST_NEO4J_URI",
    "CARAMBA_CPU_TUNING",  # caramba.backends.cpu.tuning: another tuning file, or "defaults"
})
_WARNED: set[str] = set()


def config_file(explicit: str | None = None) -> Path | None:
    if explicit:
        p = Path(explicit)
        if not p.exists():
            raise ConfigError(f"config file {explicit} does not exist")
        return p
    for p in (Path.cwd() / "caramba.yml", Path.home() / ".caramba" / "config.yml"):
        if p.exists():
            return p
    return None


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = type(getattr(Settings(), name))
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"setting '{name}' from {source}: expected {kind.__name__}, got {value!r}") from None


def load_settings(path: str | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    s = Settings()
    s.sources = {k: "default" for k in _FIELDS}
    f = config_file(path)
    if f is not None:
        import yaml

        try:
            data = yaml.safe_load(f.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {f} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {f} must be a mapping of settings")
        for k, v in data.items():
            if k not in _FIELDS:
                raise ConfigError(f"unknown setting '{k}' in {f}; {did_you_mean(str(k), _FIELDS)}")
            if k == "assets":
                v = _asset_folders(v, f)
            setattr(s, k, _coerce(k, v, str(f)))
            s.sources[k] = str(f)
    _warn_unknown_env()
    for k in _FIELDS:
        env = f"CARAMBA_{k.upper()}"
        if env in os.environ:
            setattr(s, k, _coerce(k, os.environ[env], env))
            s.sources[k] = env
    for k, v in (overrides or {}).items():
        if k not in _FIELDS:
            raise ConfigError(f"unknown setting '{k}'; {did_you_mean(k, _FIELDS)}")
        if v is not None:
            setattr(s, k, _coerce(k, v, "flag"))
            s.sources[k] = "flag"
    return s


def _asset_folders(value: Any, file: Path) -> str:
    """The ``assets`` setting of a config file: a list (or os.pathsep-separated string) of
    folders; a relative folder is taken from the config file's folder."""
    if value is None:
        return ""
    items = value.split(os.pathsep) if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(f"setting 'assets' from {file}: expected a list of folders, got {value!r}",
                          hint="assets: [my_assets, ~/shared/caramba_assets]")
    base = file.resolve().parent
    return os.pathsep.join(os.path.normpath(base / Path(i.strip()).expanduser()) for i in items if i.strip())


def _warn_unknown_env() -> None:
    """Say once (on stderr) which ``CARAMBA_*`` variables nothing reads, with a did-you-mean."""
    known = {f"CARAMBA_{k.upper()}" for k in _FIELDS} | OTHER_ENV
    for name in sorted(os.environ):
        if name.startswith("CARAMBA_") and name not in known and name not in _WARNED:
            _WARNED.add(name)
            print(f"warning: environment variable {name} is not a caramba setting and is ignored; "
                  f"{did_you_mean(name, known)}", file=sys.stderr)


def settings() -> Settings:
    """Settings from the default locations and environment (not cached: env may change)."""
    return load_settings()
