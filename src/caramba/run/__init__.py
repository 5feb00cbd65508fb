"""The one run engine: feeding, evaluation, checkpoints, metrics and resume.

``run_experiment`` (what ``caramba research run`` and the API call) and ``resume_run`` drive
each run through the Experiment actor on the in-process transport; ``--cluster`` drives the
same actor and the same ``ManifestRun`` driver on Ray. Nothing here is reimplemented per
transport.
"""

from caramba.run.engine import (
    ExperimentResult,
    RunPlan,
    RunResult,
    execute,
    inspect_run,
    ir_summary,
    ledger_root,
    loss_curve,
    plan_runs,
    resume_run,
    run_experiment,
    run_spec,
)
from caramba.run.events import Progress, RunCancelled, observe
from caramba.run.model import build_optimizer, manifest_model, param_signature

__all__ = [
    "ExperimentResult", "Progress", "RunCancelled", "RunPlan", "RunResult", "build_optimizer", "execute", "inspect_run",
    "ir_summary", "ledger_root", "loss_curve", "manifest_model", "observe", "param_signature", "plan_runs", "resume_run",
    "run_experiment", "run_spec",
]
