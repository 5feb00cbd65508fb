"""caramba.orchestrator: a persistent job queue, placement of jobs on nodes that have what they
need, time-bound leases that expire and requeue, workers, and ``run_cluster`` for sweeps."""

from caramba.orchestrator.queue import Job, JobQueue, JobSpec, Lease, LeaseLost, Requirements, refusal
from caramba.orchestrator.scheduler import Orchestrator
