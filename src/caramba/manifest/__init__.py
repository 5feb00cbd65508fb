"""caramba.manifest: YAML manifests -> validated documents -> IR graphs -> experiments.

    from caramba.manifest import check, run_experiment
    prep, lowered = check("examples/gpt2_small.yml")         # load, schema, data, lower to IR
    result = run_experiment("examples/digits_mlp.yml", ["trainer.steps=200"], backend="cpu")

Loading is light (``load``, ``load_string``); the compile and experiment entry points import
the IR, the compiler and ``caramba.train`` when first used.
"""

from caramba.manifest.errors import Loc, ManifestError, format_path
from caramba.manifest.loader import Document, dump_yaml, load, load_string, parse_override

_LAZY = {
    "check": "caramba.manifest.compile", "prepare": "caramba.manifest.compile", "Prepared": "caramba.manifest.compile",
    "run_experiment": "caramba.run", "plan_runs": "caramba.run",
    "execute": "caramba.run", "Progress": "caramba.run",
    "RunCancelled": "caramba.run", "ExperimentResult": "caramba.run",
    "inspect_run": "caramba.run", "lower_topology": "caramba.manifest.lower",
    "registry": "caramba.manifest.registry", "validate": "caramba.manifest.schema",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'caramba.manifest' has no attribute {name!r}")


__all__ = [
    "Document", "ExperimentResult", "Loc", "ManifestError", "Prepared", "Progress", "RunCancelled", "check",
    "dump_yaml", "execute", "format_path", "inspect_run", "load", "load_string", "lower_topology", "parse_override",
    "plan_runs", "prepare", "registry", "run_experiment", "validate",
]
