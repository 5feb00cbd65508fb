"""caramba.compiler: the IR pass pipeline (verify ... lower ... verify)."""

from caramba.compiler.passes import PassContext, PassResult, Stage
from caramba.compiler.pipeline import PIPELINE, CompileReport, compile_graph, run_pipeline, stage_names

__all__ = ["PIPELINE", "CompileReport", "PassContext", "PassResult", "Stage", "compile_graph", "run_pipeline", "stage_names"]
