"""Compile time: gpt2-small-shaped manifest -> IR -> the full pipeline (no training)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks.harness import Case, NotYet, Prepared, Workload

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "gpt2_small.yml"


class CompileTime(Workload):
    name = "compile_gpt2_small"
    description = "manifest -> IR -> full pipeline for a gpt2-small-shaped model"
    peers: tuple[str, ...] = ()

    def cases(self):
        return [Case(self.name, "gpt2-small (124M)", {}, None, ("quick", "full"), 0.0, 1.0)]

    def inputs(self, case, rng):
        return {}

    def reference(self, case, inputs):
        return np.zeros(())

    def caramba(self, case, runner, inputs):
        from caramba.manifest import check  # load, validate and lower the manifest to IR

        if not MANIFEST.exists():
            raise NotYet(f"needs {MANIFEST.name} in examples/")
        from caramba.compiler import compile_graph

        def run():
            t0 = time.perf_counter()
            _, lowered = check(MANIFEST)
            compile_graph(lowered.graph, runner)
            return time.perf_counter() - t0

        return Prepared(run, fetch=lambda r: np.zeros(()))
