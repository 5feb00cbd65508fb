"""Tuner strategies: which arm an experiment runs next, from the results so far.

``tuner.strategy`` (docs/manifest.md, "Tuner strategies"):

- ``all`` (default): every arm x target x run, in order (not handled here: ``run_experiment``
  plans them all at once).
- ``grid``: round-robin over the arms in listed order, one run per step, ``budget`` steps
  (default: every planned run of every arm).
- ``random``: each step draws an arm uniformly with the tuner's seeded generator.
- ``active_inference``: a Gaussian bandit whose arm choice minimises expected free energy.

A step runs one run of the chosen arm. The ``j``-th pull of an arm takes the arm's planned
(target, run) pairs in order, cycling; cycle ``c = j // len(pairs)`` runs with seed
``(seed + c * SEED_STRIDE) mod 2**63`` so that a repeated pull is a fresh sample, not a replay.

The active-inference model (host-side NumPy; deterministic given the observations and the seed).
Let ``y = metric`` for ``mode: max`` and ``y = -metric`` for ``mode: min`` (larger is better).
Over the ``F`` finite observations so far, ``m = mean(y)`` and ``s = std(y)`` (``1`` when
``F < 2`` or ``std = 0``); every observation is standardised ``z = (y - m) / s``. A failed run (or
one whose summary lacks the metric or has a non-finite value) observes
``z = min(finite z) - 1`` (``-1`` before any success): one spread worse than the worst seen.

Each arm ``a`` has an unknown mean outcome ``theta_a`` with prior ``N(0, tau^2)`` (``tau =
prior_std``); outcomes are ``z ~ N(theta_a, sigma^2)``. ``sigma^2`` is pooled over arms,
``sigma^2 = (nu0 sigma0^2 + sum_a SS_a) / (nu0 + sum_a max(n_a - 1, 0))`` with ``nu0 = 1``,
``sigma0 = noise`` and ``SS_a`` the sum of squared deviations of arm ``a``'s ``z`` from its mean
(floored at ``1e-6``). The posterior (conjugate) after ``n_a`` outcomes with sum ``S_a``:

    p_a = 1 / tau^2 + n_a / sigma^2,    mu_a = (S_a / sigma^2) / p_a,    v_a = 1 / p_a

The preference over outcomes is ``ln P~(z) = c z - ln Z`` (``c = preference``: better outcomes
are exponentially preferred). The expected free energy of pulling arm ``a`` is

    G_a = risk_a - epistemic_a
    risk_a      = -E_q[ln P~(z)] = -c mu_a                    (up to a constant)
    epistemic_a = I(theta_a; z) = 1/2 ln(1 + v_a / sigma^2)   (expected information gain)

and arms are chosen from ``q(a) = softmax(-gamma G_a)`` (``gamma = precision``), one draw per
step from ``numpy.random.default_rng(seed)``. Every arm is first tried once, in listed order,
before any is chosen by ``q`` (a belief with no observation has no scale to standardise by). The
tuner's recommendation is the arm with the largest ``mu_a`` among the arms tried.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STRATEGIES = ("all", "grid", "random", "active_inference")
SEQUENTIAL = ("grid", "random", "active_inference")  # one run per step, chosen by the tuner
MAX_BUDGET = 1024  # runs a tuner makes at most (manifest.schema.MAX_RUNS)
SEED_STRIDE = 1_000_003  # seed offset between cycles of an arm's runs
SEED_MOD = 2**63

# active_inference defaults
PRECISION = 4.0
PRIOR_STD = 1.0
NOISE = 0.5
PREFERENCE = 1.0
NU0 = 1.0
MIN_VAR = 1e-6


@dataclass
class Decision:
    """One choice of the tuner, as recorded with the run it starts (``to_json``)."""

    step: int
    arm: int
    arm_id: str
    strategy: str
    budget: int
    reason: str
    beliefs: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "step": self.step, "budget": self.budget, "arm": self.arm_id,
                "reason": self.reason, "beliefs": self.beliefs}

    def line(self) -> str:
        """One line for the CLI: the step, the arm and why (with its belief for active inference)."""
        return decision_text(self.to_json())


@dataclass
class Beliefs:
    """The active-inference bandit's state in standardised units (see the module docstring)."""

    n: np.ndarray  # [K] observations per arm
    mu: np.ndarray  # [K] posterior mean of theta_a
    var: np.ndarray  # [K] posterior variance of theta_a
    sigma2: float  # pooled observation noise
    center: float  # m
    scale: float  # s
    risk: np.ndarray
    epistemic: np.ndarray
    G: np.ndarray
    q: np.ndarray  # softmax(-gamma G)
    sign: float  # +1 for max, -1 for min

    def metric_mean(self) -> np.ndarray:
        """Posterior means back in the metric's units."""
        return self.sign * (self.center + self.scale * self.mu)

    def as_json(self, arm_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        mean = self.metric_mean()
        return {a: {"n": int(self.n[i]), "mean": float(mean[i]), "std": float(self.scale * math.sqrt(self.var[i])),
                    "risk": float(self.risk[i]), "epistemic": float(self.epistemic[i]), "G": float(self.G[i]),
                    "q": float(self.q[i])} for i, a in enumerate(arm_ids)}


def standardize(values: Sequence[float | None], mode: str) -> tuple[np.ndarray, float, float, float]:
    """``(z, m, s, sign)`` for raw metric values (``None``/non-finite: a failure)."""
    sign = 1.0 if mode == "max" else -1.0
    ok = [v is not None and math.isfinite(v) for v in values]
    y = np.array([sign * float(v) if good else 0.0 for v, good in zip(values, ok)], dtype=np.float64)
    fin = y[np.array(ok, dtype=bool)] if values else y
    m = float(fin.mean()) if fin.size else 0.0
    s = float(fin.std()) if fin.size >= 2 else 0.0
    if not (s > 0 and math.isfinite(s)):
        s = 1.0
    z = (y - m) / s
    worst = float(z[np.array(ok, dtype=bool)].min()) - 1.0 if fin.size else -1.0
    z = np.where(np.array(ok, dtype=bool), z, worst) if values else z
    return z, m, s, sign


def beliefs(k: int, arms: Sequence[int], values: Sequence[float | None], mode: str = "min", *,
            precision: float = PRECISION, prior_std: float = PRIOR_STD, noise: float = NOISE,
            preference: float = PREFERENCE) -> Beliefs:
    """The posterior over each of ``k`` arms' mean outcome after observations ``values[i]`` of
    arm ``arms[i]``, with each arm's expected free energy and the choice distribution."""
    z, m, s, sign = standardize(values, mode)
    idx = np.asarray(arms, dtype=np.int64)
    n = np.bincount(idx, minlength=k).astype(np.float64) if len(idx) else np.zeros(k)
    total = np.bincount(idx, weights=z, minlength=k) if len(idx) else np.zeros(k)
    zbar = np.divide(total, n, out=np.zeros(k), where=n > 0)
    ss = float(((z - zbar[idx]) ** 2).sum()) if len(idx) else 0.0
    df = float(np.maximum(n - 1, 0).sum())
    sigma2 = max((NU0 * noise**2 + ss) / (NU0 + df), MIN_VAR)
    p = 1.0 / prior_std**2 + n / sigma2
    mu = (total / sigma2) / p
    var = 1.0 / p
    risk = -preference * mu
    epistemic = 0.5 * np.log1p(var / sigma2)
    G = risk - epistemic
    logits = -precision * G
    q = np.exp(logits - logits.max())
    q /= q.sum()
    return Beliefs(n, mu, var, sigma2, m, s, risk, epistemic, G, q, sign)


class Chooser:
    """Picks the arm of each step of a sequential strategy and keeps the observations."""

    def __init__(self, strategy: str, arm_ids: Sequence[str], budget: int, *, mode: str = "min", seed: int = 0,
                 precision: float | None = None, prior_std: float | None = None, noise: float | None = None,
                 preference: float | None = None) -> None:
        if strategy not in SEQUENTIAL:
            raise ValueError(f"strategy {strategy!r} does not choose arms one by one")
        if not arm_ids:
            raise ValueError("a tuner needs at least one arm")
        self.strategy, self.arm_ids, self.budget, self.mode = strategy, list(arm_ids), int(budget), mode
        self.rng = np.random.default_rng(seed)
        self.options = {"precision": PRECISION if precision is None else precision,
                        "prior_std": PRIOR_STD if prior_std is None else prior_std,
                        "noise": NOISE if noise is None else noise,
                        "preference": PREFERENCE if preference is None else preference}
        self.arms: list[int] = []
        self.values: list[float | None] = []
        self.step = 0

    @classmethod
    def from_tuner(cls, tuner: Any, budget: int) -> "Chooser":
        return cls(tuner.strategy, [a.id for a in tuner.arms], budget, mode=tuner.mode, seed=tuner.seed,
                   precision=tuner.precision, prior_std=tuner.prior_std, noise=tuner.noise,
                   preference=tuner.preference)

    def beliefs(self) -> Beliefs:
        return beliefs(len(self.arm_ids), self.arms, self.values, self.mode, **self.options)

    def choose(self) -> Decision:
        """The arm of the next step (call ``observe`` with its result before choosing again)."""
        k, step = len(self.arm_ids), self.step
        snapshot: dict[str, dict[str, float]] = {}
        if self.strategy == "grid":
            arm, reason = step % k, "round-robin"
        elif self.strategy == "random":
            arm, reason = int(self.rng.integers(k)), "uniform draw"
        else:
            b = self.beliefs()
            snapshot = b.as_json(self.arm_ids)
            untried = [i for i in range(k) if b.n[i] == 0]
            if untried:
                arm, reason = untried[0], "first try of each arm"
            else:
                arm, reason = int(self.rng.choice(k, p=b.q)), "drawn from softmax(-precision * G)"
        return Decision(step, arm, self.arm_ids[arm], self.strategy, self.budget, reason, snapshot)

    def observe(self, arm: int, value: float | None) -> None:
        """Record the metric of a run of ``arm`` (``None`` or non-finite: the run failed)."""
        ok = value is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value)
        self.arms.append(int(arm))
        self.values.append(float(value) if ok else None)  # type: ignore[arg-type]
        self.step += 1

    def best(self) -> str | None:
        """The recommended arm: the largest posterior mean (in goodness) among the arms tried."""
        if not self.arms:
            return None
        b = self.beliefs()
        mu = np.where(b.n > 0, b.mu, -np.inf)
        return self.arm_ids[int(np.argmax(mu))]


def decision_text(d: Any) -> str:
    """A recorded decision (``Decision.to_json``, read back from a run's config) as one line;
    a malformed record gives what it can, never an exception."""
    if not isinstance(d, dict):
        return "tuner: (unreadable decision)"
    step, budget = d.get("step"), d.get("budget")
    where = f"step {step + 1}/{budget}" if isinstance(step, int) and isinstance(budget, int) else "step ?"
    head = f"tuner {d.get('strategy', '?')} {where}: arm '{d.get('arm', '?')}' ({d.get('reason', '')}"
    beliefs = d.get("beliefs")
    b = beliefs.get(d.get("arm")) if isinstance(beliefs, dict) and isinstance(d.get("arm"), str) else None
    if isinstance(b, dict) and all(isinstance(b.get(k), (int, float)) for k in ("n", "mean", "G", "q")):
        head += f"; n {int(b['n'])}, mean {b['mean']:.4g}, G {b['G']:.3f}, q {b['q']:.3f}"
    return head + ")"


def pull_seed(seed: int, cycle: int) -> int:
    """The seed of cycle ``cycle`` of a run whose manifest seed is ``seed``."""
    return (seed + cycle * SEED_STRIDE) % SEED_MOD


__all__ = ["Beliefs", "Chooser", "Decision", "MAX_BUDGET", "SEQUENTIAL", "STRATEGIES", "TunedPlans", "beliefs", "decision_text",
           "pull_seed", "standardize", "tuned_jobs"]


class TunedPlans:
    """The runs a sequential tuner chooses, one at a time: iterating yields ``(decision, plan)``
    (``budget`` steps at most); call ``observe(decision, value)`` with the run's ``tuner.metric``
    (None: a failure) before asking for the next. The ``j``-th pull of an arm runs the arm's
    planned (target, run) pairs in order, cycling; a repeat (cycle ``c > 0``) runs with
    ``pull_seed(seed, c)``. One place for every driver: the engine, ``caramba serve``, --cluster."""

    def __init__(self, tuner: Any, plans: Sequence[Any]) -> None:
        self.tuner = tuner
        self.by_arm: dict[str, list[Any]] = {a.id: [] for a in tuner.arms}
        for p in plans:
            self.by_arm[p.arm].append(p)
        self.budget = min(tuner.budget if tuner.budget is not None else len(plans), MAX_BUDGET)
        self.chooser = Chooser.from_tuner(tuner, self.budget)
        self.pulls = dict.fromkeys(self.by_arm, 0)

    def __iter__(self) -> Iterator[tuple["Decision", Any]]:
        for _ in range(self.budget):
            decision = self.chooser.choose()
            yield decision, self._plan(decision)

    def _plan(self, decision: "Decision") -> Any:
        from dataclasses import replace

        pool = self.by_arm[decision.arm_id]
        j = self.pulls[decision.arm_id]
        self.pulls[decision.arm_id] = j + 1
        base = pool[j % len(pool)]
        cycle = j // len(pool)
        if cycle == 0:
            return base
        return replace(base, run=base.run.model_copy(update={"seed": pull_seed(base.run.seed, cycle)}), cycle=cycle)

    def observe(self, decision: "Decision", value: float | None) -> None:
        self.chooser.observe(decision.arm, value)

    def final(self) -> dict[str, Any]:
        """What the last run's config records as ``tuner_final``: the pick and (active
        inference) the beliefs after the last observation."""
        beliefs = self.chooser.beliefs().as_json(self.chooser.arm_ids) if self.tuner.strategy == "active_inference" else {}
        return {"best": self.chooser.best(), "beliefs": beliefs}


def tuned_jobs(plans: Sequence[Any], tuner: Any, store: Any, group: str = "", data_roots: list[str] | None = None,
               on_decision: Any = None) -> Iterator[Any]:
    """``caramba.run.engine.run_tuned`` one step at a time, for callers that run each run in
    their own slot with its own progress object (``caramba serve``, the ``--cluster`` driver):
    each item is a job ``job(progress) -> RunResult`` that runs the step's chosen run; the next
    decision is made only when the next item is asked for, after the previous job ran (a job
    that was never run ends the sequence). Decisions, seeds of repeated pulls, the recorded
    ``config.tuner`` and the final ``tuner_final`` are the same as ``run_tuned``'s."""
    from caramba.run.engine import execute

    seq = TunedPlans(tuner, plans)
    last: Any = None
    for decision, plan in seq:
        box: dict[str, Any] = {}

        def job(progress: Any, plan: Any = plan, decision: Decision = decision, box: dict[str, Any] = box) -> Any:
            if on_decision is not None:
                on_decision(decision)
            box["result"] = execute(plan, store, progress, group, data_roots, tuner=decision.to_json())
            return box["result"]

        yield job
        result = box.get("result")
        if result is None:
            break
        seq.observe(decision, result.summary.get(tuner.metric) if result.status == "finished" else None)
        last = result
    if last is not None:
        store.update_config(last.run_id, {"tuner_final": seq.final()})
