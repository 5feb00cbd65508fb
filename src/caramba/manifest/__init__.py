"""caramba.manifest: YAML manifests -> validated documents -> IR graphs -> experiments."""

from caramba.manifest.errors import Loc, ManifestError, format_path
from caramba.manifest.loader import Document, dump_yaml, load, load_string, parse_override

__all__ = ["Document", "Loc", "ManifestError", "dump_yaml", "format_path", "load", "load_string", "parse_override"]
