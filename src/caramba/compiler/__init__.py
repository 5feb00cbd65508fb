"""caramba.compiler: the IR pass pipeline.

``verify → canonicalize → cse → simplify → fuse → dce → memory → schedule → lower → verify``;
each pass is ``(graph, ctx) -> PassResult``. ``compile_graph(graph, runner)`` runs it for a
runner's capabilities; ``disable=("fuse", ...)`` skips optional passes by name.
"""

from caramba.compiler.memory import MemoryPlan, Slot, plan_memory
from caramba.compiler.passes import PassContext, PassResult, Stage
from caramba.compiler.pipeline import (
    PIPELINE,
    CompileReport,
    compile_for,
    compile_graph,
    optional_stages,
    run_pipeline,
    stage_names,
)
from caramba.compiler.schedule import Cost, Schedule, node_cost

__all__ = [
    "PIPELINE", "CompileReport", "Cost", "MemoryPlan", "PassContext", "PassResult", "Schedule", "Slot", "Stage",
    "compile_for", "compile_graph", "node_cost", "optional_stages", "plan_memory", "run_pipeline", "stage_names",
]
