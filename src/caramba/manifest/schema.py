"""The manifest document as typed models (pydantic). Unknown keys are errors.

A manifest has a ``topology`` (the model: declared inputs, nodes, outputs) and, to be an
experiment, ``datasets``, a ``trainer``, ``metrics``, ``checkpoints``, ``targets`` with runs,
and optionally a ``tuner``; an optional ``model`` section freezes parameters and adds LoRA
adapters. ``validate(doc)`` turns a loaded Document into a ``Manifest`` and every validation
problem into one ManifestError at the offending line.

Types are strict (YAML ``true`` is not a number, ``"1e3"`` is not a float), every float is
finite and every int has bounds: the limits below are what a run accepts, so a manifest that
validates does not fail later on a value a run would refuse.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from caramba.data.sources import MAX_HAWKES_EVENTS  # events a hawkes dataset simulates (n * events)
from caramba.errors import did_you_mean
from caramba.manifest.errors import ManifestError, format_path, short
from caramba.manifest.loader import Document

IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"
NAME = r"^[A-Za-z_][A-Za-z0-9_.-]*$"

# Limits (docs/manifest.md, "Limits"). Seeds feed numpy generators and the run store's int64.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_SEED = INT64_MAX
MAX_DIM = 2**31 - 1  # one dimension of an input, a symbolic dim, a context length
MAX_STEPS = 10**9  # steps, warmup and every cadence counted in steps
MAX_BATCH = 2**20  # batch_size, eval_batch_size
MAX_EXAMPLES = 2**22  # generated examples, dataset limit
MAX_DATA_VALUES = 2**22  # values a generated dataset draws (n * features, n * length, classes * features)
MAX_CLASSES = 2**16
MAX_KEEP = 1000  # checkpoints kept per run
MAX_ARMS = 32  # tuner arms (each is validated like a manifest of its own)
MAX_RUNS = 1024  # planned runs: arms x targets x runs
MAX_LORA_RANK = 4096
MAX_PATTERNS = 256  # model.freeze globs, model.lora.targets globs

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, description="0 <= seed < 2**63")]
Steps = Annotated[int, Field(ge=0, le=MAX_STEPS)]


class Strict(BaseModel):
    """Base of every manifest model: unknown keys are errors that suggest the right one."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=False, strict=True,
                              allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            names = set()
            for name, f in cls.model_fields.items():
                names.add(f.alias or name)
            for key in data:
                if key not in names:
                    raise PydanticCustomError(
                        "unknown_key",
                        "unknown key '{key}'; {hint}",
                        {"key": key, "hint": did_you_mean(str(key), names)},
                    )
        return data


# ---- topology -----------------------------------------------------------------------------


class InputSpec(Strict):
    """An external input of a topology: shape (ints or symbolic dims like ``batch``) and dtype."""

    shape: list[int | Annotated[str, Field(pattern=IDENT)]] = Field(max_length=32)
    dtype: str = "float64"
    description: str = ""

    @field_validator("shape")
    @classmethod
    def _dims(cls, v: list[Any]) -> list[Any]:
        for d in v:
            if isinstance(d, int) and d < 0:
                raise ValueError(f"dimension {d} is negative")
            if isinstance(d, int) and d > MAX_DIM:
                raise ValueError(f"dimension {d} is over the limit of {MAX_DIM}")
        return v


class NodeSpec(Strict):
    """One topology node: ``{id, op, in, out, config}``.

    ``in`` names published values (a node publishes its ``id`` for its first output and the
    names in ``out`` for its outputs in order); ``config`` is checked against the op's schema.
    """

    id: str = Field(pattern=IDENT)
    op: str = Field(pattern=NAME)
    in_: list[str] = Field(default_factory=list, alias="in")
    out: list[Annotated[str, Field(pattern=IDENT)]] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    precision: str | None = None
    description: str = ""

    @field_validator("in_", "out", mode="before")
    @classmethod
    def _one_name(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class FromSafetensors(Strict):
    """A Hugging Face checkpoint as the topology's model node (docs/pretrained.md)."""

    source: str = Field(min_length=1, max_length=4096, description="checkpoint directory, index or .safetensors file")
    architecture: str | None = Field(None, max_length=200, description="default: config.json architectures[0]")
    config: str | None = Field(None, min_length=1, max_length=4096, description="default: config.json beside the source")
    variables: dict[Annotated[str, Field(pattern=IDENT)], Any] = Field(default_factory=dict)
    id: str = Field("model", pattern=IDENT, description="the model node's ID (parameters are <id>.<name>)")
    dtype: str | None = Field(None, description="parameter dtype (default: the topology's dtype)")
    allow_narrowing: bool = Field(False, description="read wider checkpoint tensors into narrower parameters")


class Topology(Strict):
    inputs: dict[Annotated[str, Field(pattern=IDENT)], InputSpec] = Field(default_factory=dict)
    from_safetensors: FromSafetensors | None = None
    nodes: list[NodeSpec] = Field(default_factory=list)
    outputs: dict[str, str] = Field(default_factory=dict)
    dims: dict[str, Annotated[int, Field(ge=1, le=MAX_DIM)]] = Field(default_factory=dict,
                                                                     description="default sizes of symbolic dims")
    dtype: str = "float64"
    description: str = ""
    _pretrained: Any = PrivateAttr(None)  # set by resolve_pretrained

    @field_validator("outputs", mode="before")
    @classmethod
    def _outputs(cls, v: Any) -> Any:
        if isinstance(v, list):
            return {str(x): x for x in v}
        if isinstance(v, str):
            return {v: v}
        return v

    @model_validator(mode="after")
    def _some_nodes(self) -> "Topology":
        if not self.nodes and self.from_safetensors is None:
            raise ValueError("a topology needs nodes (or from_safetensors: a checkpoint as its model)")
        return self

    @property
    def pretrained(self) -> Any:
        """The resolved ``from_safetensors`` section (``caramba.manifest.pretrained.Resolved``) or None."""
        return self._pretrained

    @property
    def all_nodes(self) -> list[NodeSpec]:
        """The nodes as lowered: the checkpoint's model node first, then ``nodes``."""
        res = self.pretrained
        return ([res.node] if res is not None else []) + list(self.nodes)


# ---- experiment ---------------------------------------------------------------------------


class Split(Strict):
    """Fractions of the examples in each split: each in [0, 1], train > 0, adding up to 1."""

    train: float = Field(0.8, gt=0, le=1)
    val: float = Field(0.0, ge=0, le=1)
    test: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _sums(self) -> "Split":
        parts = (self.train, self.val, self.test)
        if abs(sum(parts) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must add up to 1; got {parts}")
        return self


class _Dataset(Strict):
    split: Split = Field(default_factory=Split)
    seed: Seed = 0
    feed: dict[str, str] = Field(default_factory=dict, description="topology input -> dataset field")
    limit: int | None = Field(default=None, ge=1, le=MAX_EXAMPLES, description="use only the first N examples")


class SklearnData(_Dataset):
    """Small real data bundled with scikit-learn (``pip install caramba[data]``); no network."""

    source: Literal["sklearn"]
    name: Literal["digits", "iris", "wine", "breast_cancer"] = "digits"
    scale: bool = Field(True, description="digits: pixels / 16; others: standardize features")


class GeneratedData(_Dataset):
    """Synthetic data from a seeded generator."""

    source: Literal["generated"]
    kind: Literal["blobs", "spirals", "xor", "regression", "tones", "factors", "tmaze"] = "blobs"
    n: int = Field(1000, ge=2, le=MAX_EXAMPLES)
    features: int = Field(2, ge=1, le=MAX_DATA_VALUES)
    classes: int = Field(2, ge=2, le=MAX_CLASSES)
    noise: float = Field(0.1, ge=0, le=1e6)
    length: int = Field(256, ge=1, le=MAX_DATA_VALUES, description="samples per waveform (tones)")
    factors: int = Field(3, ge=1, le=64, description="index fields f0, f1, ... per example, each in [0, classes) (factors)")

    @model_validator(mode="after")
    def _size(self) -> "GeneratedData":
        width = {"blobs": self.features, "regression": self.features, "tones": self.length, "tmaze": 17}.get(self.kind, 2)
        for what, values in ((f"n * {'length' if self.kind == 'tones' else 'features'}", self.n * width),
                             ("classes * features", self.classes * self.features if self.kind == "blobs" else 0)):
            if values > MAX_DATA_VALUES:
                raise ValueError(f"a generated dataset of {what} = {values:,} values is over the limit of "
                                 f"{MAX_DATA_VALUES:,}; use fewer examples or a local npz file")
        return self


class HawkesData(_Dataset):
    """Event sequences simulated from a multivariate Hawkes process (``hawkes.simulate``'s Ogata
    thinning): fields ``times`` [events], ``marks`` int64 [events] and ``T`` (the last event's
    time) per sequence. ``alpha`` and ``beta`` are [M][M][K] nested lists (j excites i)."""

    source: Literal["hawkes"]
    n: int = Field(32, ge=1, le=MAX_HAWKES_EVENTS, description="sequences")
    events: int = Field(256, ge=2, le=MAX_HAWKES_EVENTS, description="events per sequence")
    mu: list[float] = Field(min_length=1, max_length=16, description="baseline rates [M], each > 0")
    alpha: list[list[list[float]]] = Field(description="branching ratios [M][M][K], each >= 0")
    beta: list[list[list[float]]] = Field(description="decay rates [M][M][K], each > 0")

    @model_validator(mode="after")
    def _process(self) -> "HawkesData":
        import math

        m = len(self.mu)
        shape = (m, m, len(self.alpha[0][0]) if self.alpha and self.alpha[0] else 0)
        for name, p in (("alpha", self.alpha), ("beta", self.beta)):
            if len(p) != m or any(len(r) != m for r in p) or any(len(c) != shape[2] or not c for r in p for c in r):
                raise ValueError(f"{name} must be [M][M][K] = [{m}][{m}][K] nested lists (K >= 1, the same for alpha and beta)")
        values = [*self.mu, *(v for r in self.alpha for c in r for v in c), *(v for r in self.beta for c in r for v in c)]
        if not all(math.isfinite(v) for v in values):
            raise ValueError("mu, alpha and beta must be finite numbers")
        if min(self.mu) <= 0 or min(v for r in self.beta for c in r for v in c) <= 0:
            raise ValueError("mu and beta must be > 0")
        if min(v for r in self.alpha for c in r for v in c) < 0:
            raise ValueError("alpha must be >= 0 (Ogata thinning needs an intensity that decays between events)")
        if self.n * self.events > MAX_HAWKES_EVENTS:
            raise ValueError(f"n * events = {self.n * self.events:,} events is over the limit of {MAX_HAWKES_EVENTS:,} "
                             "(simulated on the host, about 25 us per event); bigger data belongs in a file")
        import numpy as np

        branching = np.array([[sum(c) for c in r] for r in self.alpha])
        if not np.all(np.isfinite(branching)):
            raise ValueError("the sums over k of alpha must be finite")
        radius = max(abs(np.linalg.eigvals(branching)))
        if radius >= 1:
            raise ValueError(f"the process is explosive: the spectral radius of sum_k alpha is {radius:.3g}, needs < 1")
        return self


MAX_CAUSAL_VARIABLES = 64  # variables of a causal_linear SCM


class CausalLinearData(_Dataset):
    """Rows sampled from a linear-Gaussian SCM ``x_j = b_j + sum_i weights[i][j] x_i + e_j``,
    ``e_j ~ N(0, noise_j^2)`` (caramba.ops.causal's convention): field ``data`` [d] per row.
    ``weights`` [d][d] must be a DAG; ``noise`` are standard deviations."""

    source: Literal["causal_linear"]
    n: int = Field(1000, ge=2, le=MAX_EXAMPLES, description="rows")
    weights: list[list[float]] = Field(min_length=1, max_length=MAX_CAUSAL_VARIABLES,
                                       description="W [d][d]: W[i][j] the direct effect of x_i on x_j")
    noise: list[float] = Field(description="noise standard deviations [d], each >= 0")
    intercepts: list[float] | None = Field(default=None, description="b [d] (default 0)")

    @model_validator(mode="after")
    def _scm(self) -> "CausalLinearData":
        import math

        d = len(self.weights)
        if any(len(r) != d for r in self.weights):
            raise ValueError(f"weights must be a square [d][d] = [{d}][{d}] nested list")
        for name, vec in (("noise", self.noise), ("intercepts", self.intercepts)):
            if vec is not None and len(vec) != d:
                raise ValueError(f"{name} must have d = {d} entries like weights, got {len(vec)}")
        values = [*(v for r in self.weights for v in r), *self.noise, *(self.intercepts or ())]
        if not all(math.isfinite(v) for v in values):
            raise ValueError("weights, noise and intercepts must be finite numbers")
        if min(self.noise) < 0:
            raise ValueError("noise standard deviations must be >= 0")
        left = set(range(d))  # acyclic: repeatedly remove a variable with no parents left
        while left:
            roots = [j for j in left if not any(self.weights[i][j] != 0 for i in left if i != j)]
            if not roots or any(self.weights[j][j] != 0 for j in roots):
                raise ValueError(f"weights must be a DAG: variables {sorted(left)} lie on a cycle (or a self-loop)")
            left -= set(roots)
        if self.n * d > MAX_DATA_VALUES:
            raise ValueError(f"n * d = {self.n * d:,} values is over the limit of {MAX_DATA_VALUES:,}")
        return self


class NpzData(_Dataset):
    """Arrays from a local .npz file (fields are the array names)."""

    source: Literal["npz"]
    path: str
    fields: dict[str, str] = Field(default_factory=dict, description="field -> array name (default: all arrays)")


class CsvData(_Dataset):
    """A local CSV file of numbers: feature columns become ``x``, the target column ``y``."""

    source: Literal["csv"]
    path: str
    target: str | Int64 = -1
    header: bool = True
    delimiter: str = ","
    target_dtype: Literal["int64", "float64"] = "int64"

    @field_validator("delimiter")
    @classmethod
    def _one_char(cls, v: str) -> str:
        if len(v) != 1 or v in "\"\r\n" or v.isalnum() or v in ".-+":
            raise ValueError(f"delimiter must be one character that is not a quote, line break, digit, letter, "
                             f"sign or decimal point (e.g. ',' ';' or a tab), got {v!r}")
        return v


class TextTokenizer(Strict):
    """How a ``text`` dataset turns its text into tokens: ``{type: bpe, vocab_size: N,
    min_frequency: 2}`` trains a byte-level BPE on the file; ``{path: DIR_OR_FILE}`` reads a
    Hugging Face tokenizer.json (a folder holding one, or the file)."""

    type: Literal["bpe"] | None = None
    vocab_size: int | None = Field(default=None, ge=257, le=MAX_DIM,
                                   description="tokens of the trained BPE: <|endoftext|> (ID 0), 256 bytes, merges")
    min_frequency: int | None = Field(default=None, ge=1, le=INT64_MAX,
                                      description="fewest occurrences of a pair the BPE merges (default 2)")
    path: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> "TextTokenizer":
        if (self.type is None) == (self.path is None):
            raise ValueError("give either `type: bpe` (with vocab_size) to train a tokenizer or `path:` to a "
                             "tokenizer.json (or a folder with one)")
        if self.type == "bpe" and self.vocab_size is None:
            raise ValueError("a trained bpe tokenizer needs `vocab_size` (e.g. 512)")
        if self.path is not None and (self.vocab_size is not None or self.min_frequency is not None):
            raise ValueError("vocab_size and min_frequency train a tokenizer: drop them with `path:`")
        return self


class TextData(_Dataset):
    """A corpus from a local text file: windows of ``context`` tokens, ``x``/``y`` shifted by
    one. Tokens are characters unless ``tokenizer`` trains or names one."""

    source: Literal["text"]
    path: str
    context: int = Field(64, ge=1, le=MAX_DIM)
    split: Split = Field(default_factory=lambda: Split(train=0.9, val=0.1, test=0.0))
    encoding: str = "utf-8"
    max_chars: int | None = Field(default=None, ge=2, le=INT64_MAX)
    vocab_size: int | None = Field(default=None, ge=1, le=MAX_DIM,
                                   description="fail if the text has more distinct characters (more tokens than "
                                   "this with a tokenizer)")
    tokenizer: TextTokenizer | None = None

    @field_validator("tokenizer")
    @classmethod
    def _fits(cls, t: TextTokenizer | None, info: Any) -> TextTokenizer | None:  # info: ValidationInfo
        # a field validator (vocab_size is validated before it), so the error is at `tokenizer:`
        limit = info.data.get("vocab_size")
        if t is not None and t.vocab_size is not None and limit is not None and limit < t.vocab_size:
            raise ValueError(f"vocab_size {limit} is smaller than the tokenizer's vocab_size {t.vocab_size}")
        return t

    @field_validator("encoding")
    @classmethod
    def _codec(cls, v: str) -> str:
        import codecs

        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown text encoding {v!r} (e.g. utf-8, latin-1)") from None
        return v


class DeeplakeData(Strict):
    """Columns of a Deep Lake dataset (``pip install caramba[deeplake]``), read in batches, never
    whole (caramba.data.deeplake). Splits come from a text column of train/val/test per row."""

    source: Literal["deeplake"]
    path: str = Field(min_length=1, max_length=4096, description="a dataset folder or s3://bucket/prefix")
    columns: dict[Annotated[str, Field(pattern=IDENT)], Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=dict, max_length=256, description="field -> column (default: every numeric column)")
    split_column: str = Field("split", min_length=1, max_length=256, description="text column: train, val or test")
    dtype: dict[str, Literal["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                             "uint32", "bool"]] = Field(default_factory=dict, max_length=256,
                                                       description="field -> dtype cast to on read")
    feed: dict[str, str] = Field(default_factory=dict, description="topology input -> dataset field")
    limit: int | None = Field(default=None, ge=1, le=INT64_MAX, description="use only the first N rows")
    verify: bool = Field(True, description="check a local dataset's files against the digests caramba data import "
                         "wrote before reading it")

    @model_validator(mode="before")
    @classmethod
    def _no_fractions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in (("split", "its splits come from its split column (`split_column:`, default `split`)"),
                             ("seed", "its rows keep their stored order (no seeded shuffle before splitting)")):
                if key in data:
                    raise PydanticCustomError("unknown_key", "unknown key '{key}' for a deeplake dataset: {hint}",
                                              {"key": key, "hint": why})
        return data

    @field_validator("path")
    @classmethod
    def _location(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError("path must not contain NUL characters")
        if "://" in v and not v.startswith(("s3://", "file://")):
            raise ValueError(f"path scheme '{v.split('://', 1)[0]}://' is not supported; use a folder or "
                             "s3://bucket/prefix")
        if v.startswith("s3://") and not v[5:].split("/", 1)[0]:
            raise ValueError("an s3 path needs a bucket: s3://bucket/prefix")
        return v


DatasetSpec = Annotated[SklearnData | GeneratedData | HawkesData | CausalLinearData | NpzData | CsvData | TextData
                        | DeeplakeData, Field(discriminator="source")]


class OptimizerSpec(Strict):
    """``op`` names an optimizer schema (``caramba asset list optimizer``); the other keys are its config."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    op: str = "optimizer.adamw"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:  # config keys are checked against the optimizer schema
        if isinstance(data, str):
            return {"op": data}
        return data

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Schedule(Strict):
    """Learning rate schedule: a linear warmup over ``warmup_steps``, then ``trainer.lr``
    (constant) or a cosine decay to ``min_lr`` at the last step (cosine)."""

    kind: Literal["constant", "cosine"] = "constant"
    warmup_steps: Steps = 0
    min_lr: float = Field(0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


class Trainer(Strict):
    data: str | None = Field(default=None, description="dataset to train on (default: the only one)")
    loss: str = Field("loss", description="topology output to minimize (a scalar)")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    lr: float = Field(1e-3, gt=0)
    schedule: Schedule = Field(default_factory=Schedule)
    batch_size: int = Field(32, ge=1, le=MAX_BATCH)
    steps: Steps = 100
    grad_clip: float | None = Field(default=None, gt=0, description="clip the global gradient norm")
    eval_every: Steps = Field(0, description="evaluate every N steps (0: only at the end)")
    eval_batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    eval_batches: int | None = Field(default=None, ge=1, le=MAX_STEPS, description="cap on eval batches per split")
    log_every: int = Field(10, ge=1, le=MAX_STEPS)
    checkpoint_every: Steps | None = Field(default=None, description="checkpoint (and commit the metrics) every N "
                                         "steps; a run resumes from its newest one (default: checkpoints.every)")

    @field_validator("optimizer", mode="before")
    @classmethod
    def _opt(cls, v: Any) -> Any:
        return {"op": v} if isinstance(v, str) else v


class Checkpoints(Strict):
    every: Steps = Field(0, description="save every N steps (0: only at the end)")
    at_end: bool = True
    keep: int = Field(1, ge=1, le=MAX_KEEP)


class Run(Strict):
    id: str = Field(pattern=NAME)
    seed: Seed = 0
    steps: Steps | None = None
    mode: Literal["train", "eval"] = "train"
    checkpoint: str | None = Field(default=None, description="start from this checkpoint (a file or run ID)")
    checkpoint_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$",
                                          description="the sha256 a checkpoint file must have (a run's are recorded)")
    trust_checkpoint: bool = Field(False, description="load a checkpoint file whose digest nobody recorded")


class Target(Strict):
    name: str = Field(pattern=NAME)
    backend: str | None = None
    disable_passes: list[str] = Field(default_factory=list, description="optional compiler passes to skip (e.g. fuse)")
    description: str = ""
    runs: list[Run] = Field(default_factory=lambda: [Run(id="seed0")], min_length=1)

    @field_validator("runs")
    @classmethod
    def _unique_runs(cls, v: list[Run]) -> list[Run]:
        ids = [r.id for r in v]
        if len(set(ids)) != len(ids):
            raise ValueError(f"run ids must be unique, got {ids}")
        return v


class Arm(Strict):
    id: str = Field(pattern=NAME)
    set: dict[str, Any] = Field(default_factory=dict, description="dotted path -> value, like --set")
    description: str = ""


TUNER_STRATEGIES = ("all", "grid", "random", "active_inference")  # caramba.run.tuner
TUNER_AI_OPTIONS = ("precision", "prior_std", "noise", "preference")


class Tuner(Strict):
    """Arms (each a set of overrides) and how to pick the runs: ``all`` runs every arm x target x
    run; ``grid``, ``random`` and ``active_inference`` run ``budget`` runs one by one, each of an
    arm the strategy picks from the results so far (``caramba.run.tuner``)."""

    strategy: str = Field("all", description="all | grid | random | active_inference")
    metric: str = "val.loss"
    mode: Literal["min", "max"] = "min"
    budget: int | None = Field(default=None, ge=1, le=MAX_RUNS, description="runs in total (random, "
                               "active_inference: required; grid: default every planned run)")
    seed: Seed = 0
    precision: float | None = Field(default=None, gt=0, le=1e6, description="active_inference: gamma of softmax(-gamma G)")
    prior_std: float | None = Field(default=None, gt=0, le=1e6, description="active_inference: tau, prior std of an arm's mean")
    noise: float | None = Field(default=None, gt=0, le=1e6, description="active_inference: sigma0, prior outcome noise")
    preference: float | None = Field(default=None, ge=0, le=1e6, description="active_inference: c, ln P~(z) = c z")
    arms: list[Arm] = Field(min_length=1, max_length=MAX_ARMS)

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in TUNER_STRATEGIES:
            raise ValueError(f"unknown tuner strategy {short(v)}; {did_you_mean(v, TUNER_STRATEGIES)}")
        return v

    @field_validator("budget", "seed")
    @classmethod
    def _sequential_only(cls, v: Any, info: Any) -> Any:
        if info.data.get("strategy", "?") == "all":  # (a strategy that failed validation is not in data)
            raise ValueError(f"tuner.{info.field_name} is for a strategy that picks runs one by one (grid, random, "
                             "active_inference); strategy all runs every arm x target x run")
        return v

    @field_validator(*TUNER_AI_OPTIONS)
    @classmethod
    def _ai_only(cls, v: Any, info: Any) -> Any:
        strategy = info.data.get("strategy", "active_inference")
        if strategy != "active_inference":
            raise ValueError(f"tuner.{info.field_name} is an option of strategy active_inference, not {strategy}")
        return v

    @field_validator("arms")
    @classmethod
    def _unique_arms(cls, v: list[Arm]) -> list[Arm]:
        ids = [a.id for a in v]
        if len(set(ids)) != len(ids):
            raise ValueError(f"tuner arm ids must be unique, got {ids}")
        return v

    @model_validator(mode="after")
    def _needs_budget(self) -> "Tuner":
        if self.strategy in ("random", "active_inference") and self.budget is None:
            raise ValueError(f"tuner strategy {self.strategy} needs a budget (the number of runs to make, "
                             f"1 to {MAX_RUNS})")
        return self


# ---- embeddings ----------------------------------------------------------------------------

COLLECTION = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"  # a vector collection (caramba.store.vectors)


class Embeddings(Strict):
    """After a run trains, its model evaluates ``output`` over ``split`` of the trainer's dataset
    and writes one vector per example, with the run's provenance, into the vector store's
    ``collection`` (``caramba.store.vectors``; ``caramba search`` finds neighbours)."""

    output: str = Field(min_length=1, max_length=200, description="a topology output or node (published value)")
    split: Literal["train", "val", "test"] = "test"
    collection: str = Field(max_length=1000, description="letters, digits, _ and -, at most 63")
    distance: Literal["cosine", "dot", "euclid"] = "cosine"
    label: str | None = Field(default=None, min_length=1, max_length=200,
                              description="dataset field kept as each point's label (default: y when it is one number)")
    limit: int | None = Field(default=None, ge=1, le=MAX_EXAMPLES, description="write only the first N examples")

    @field_validator("collection")
    @classmethod
    def _collection(cls, v: str) -> str:
        if not re.fullmatch(COLLECTION, v):
            raise ValueError(f"{short(v)} is not a collection name (1 to 63 letters, digits, _ and -, "
                             "starting with a letter or digit)")
        return v


# ---- fine-tuning ---------------------------------------------------------------------------

Glob = Annotated[str, Field(min_length=1, max_length=1000)]


class LoraSpec(Strict):
    """LoRA adapters on the linears ``targets`` names (``caramba.manifest.lora``):
    ``y = x @ W (+ b) + alpha / rank * ((drop(x) @ A) @ B)``, B zeros at the start."""

    rank: int = Field(8, ge=1, le=MAX_LORA_RANK)
    alpha: float | None = Field(default=None, gt=0, le=1e6, description="scale = alpha / rank (default: rank)")
    targets: list[Glob] = Field(min_length=1, max_length=MAX_PATTERNS,
                                description="fnmatch globs over linear names (gpt.h_0.attn.qkv)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA branch input while training")
    freeze_base: bool = Field(True, description="freeze every parameter that is not a LoRA adapter")


class ModelSpec(Strict):
    """Fine-tuning controls of the topology's parameters: ``freeze`` globs and ``lora`` adapters."""

    freeze: list[Glob] = Field(default_factory=list, max_length=MAX_PATTERNS,
                               description="fnmatch globs over parameter names (gpt.h_0.*)")
    lora: LoraSpec | None = None

    @field_validator("freeze", mode="before")
    @classmethod
    def _one_glob(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Manifest(Strict):
    """A whole manifest after expansion."""

    name: str = Field("experiment", pattern=NAME)
    description: str = ""
    version: Int64 | str | None = None
    topology: Topology
    model: ModelSpec | None = Field(default=None, description="freeze parameters, LoRA adapters")
    datasets: dict[Annotated[str, Field(pattern=IDENT)], DatasetSpec] = Field(default_factory=dict)
    trainer: Trainer | None = None
    metrics: list[str] = Field(default_factory=list)
    checkpoints: Checkpoints = Field(default_factory=Checkpoints)
    targets: list[Target] = Field(default_factory=list)
    tuner: Tuner | None = None
    embeddings: Embeddings | None = Field(default=None, description="write a named output's vectors after each run")

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, v: list[Target]) -> list[Target]:
        names = [t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError(f"target names must be unique, got {names}")
        return v

    @property
    def is_experiment(self) -> bool:
        return self.trainer is not None or any(r.mode == "eval" for t in self.targets for r in t.runs)

    @property
    def trains(self) -> bool:
        """Some run takes a training step: one in mode train whose steps (its own, else
        ``trainer.steps``) are not 0. When none does, every run only evaluates and the model
        needs no trainable parameter."""
        t = self.trainer
        return t is not None and any(r.mode == "train" and (r.steps if r.steps is not None else t.steps)
                                     for tg in self.targets or [Target(name="default")] for r in tg.runs)


# ---- validation errors -> ManifestError ---------------------------------------------------


def validate(doc: Document) -> Manifest:
    """Check ``doc`` against the schema and its nodes against the asset registry; every
    independent problem found is reported in one located ManifestError (``errors`` lists them;
    ``line``/``path`` are the first one's).

    A document loaded from a file with an ``assets/`` folder beside it puts that folder on the
    asset search path (``caramba.manifest.registry``) for this manifest."""
    if not isinstance(doc.data, dict):
        raise doc.error((), "a manifest must be a mapping of sections")
    use_manifest_assets(doc)
    try:
        m = Manifest.model_validate(doc.data)
    except ValidationError as exc:
        raise _to_manifest_error(doc, exc) from None
    resolve_pretrained(m.topology, doc)
    problems = check_references(m, doc)
    if problems:
        raise ManifestError.combine(problems)
    return m


def use_manifest_assets(doc: Document) -> None:
    """Make the ``assets/`` folder beside ``doc`` (if any) the manifest part of the asset search
    path. Under a server's data roots the folder must lie inside them, like any file it reads."""
    if doc.assets is None:  # a Document made in code, not loaded: the search path stays as it is
        return
    from caramba.manifest.registry import set_manifest_assets

    folders = [doc.assets] if doc.assets else []
    if folders:
        from caramba.data.sources import outside_roots

        if outside_roots(doc.base_dir, doc.assets):
            raise doc.error((), "the manifest's assets/ folder is outside the folders this server reads from",
                            hint="put assets on the server's asset path (setting assets, CARAMBA_ASSET_PATH)")
    set_manifest_assets(folders)


def check_references(m: Manifest, doc: Document) -> list[ManifestError]:
    """What every node of the topology refers to, each problem on its own: its op (an asset),
    its config (the op's schema), its inputs (earlier nodes or topology inputs), its ID and
    ``out`` names; then the topology's outputs. Lowering checks the same on the way (and
    stops at the first); collecting here reports them all at once."""
    from caramba.errors import CarambaError
    from caramba.manifest.registry import registry

    reg = registry()
    out: list[ManifestError] = []
    topo = m.topology
    published: set[str] = set(topo.inputs)
    producers = dict.fromkeys(topo.inputs, "a topology input")
    res = topo.pretrained
    listed = [((("topology", "from_safetensors")), res.node)] if res is not None else []
    listed += [(("topology", "nodes", i), n) for i, n in enumerate(topo.nodes)]

    class _Bad(Exception):
        pass

    for npath, spec in listed:  # in the order lowering checks them, but every problem, not the first
        try:
            asset = reg.get(spec.op, ("operation", "block", "model"))
        except KeyError as exc:
            out.append(doc.error((*npath, "op"), exc.args[0], node=spec.id))
            asset = None
        if spec.id in producers:
            out.append(doc.error((*npath, "id"), f"duplicate node id '{spec.id}' (also {producers[spec.id]})",
                                 node=spec.id))
        if asset is not None:
            lo, hi = asset.arity()
            if not lo <= len(spec.in_) <= hi:
                names = ", ".join(p.name + ("?" if p.optional else "") for p in asset.inputs) or "none"
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                out.append(doc.error((*npath, "in"), f"{spec.op} takes {want} input{'s' if hi != 1 else ''} "
                                     f"({names}), got {len(spec.in_)}: {spec.in_}", node=spec.id))
        for j, name in enumerate(spec.in_):
            if name not in published:
                hint = did_you_mean(name, published) if published else "nothing is defined yet"
                out.append(doc.error((*npath, "in", j), f"input '{name}' of node '{spec.id}' is not an input of the "
                                     f"topology nor produced by an earlier node; {hint}", node=spec.id))
        if asset is not None:
            def bad_config(key: str | None, msg: str, npath: tuple = npath, spec: NodeSpec = spec) -> None:
                p = (*npath, "config", key) if key is not None else (*npath, "config")
                out.append(doc.error(p, msg, key=key is not None and key not in spec.config, node=spec.id, op=spec.op))
                raise _Bad

            try:
                asset.resolve_config(spec.config, bad_config)
            except _Bad:
                pass
            except CarambaError as exc:
                out.append(doc.error((*npath, "config"), exc.message, node=spec.id, op=spec.op))
        for name in [n for n in spec.out if n != spec.id]:
            if name in producers:
                out.append(doc.error((*npath, "out"), f"'{name}' is already defined (by {producers[name]})",
                                     node=spec.id))
        producers.setdefault(spec.id, f"node at {doc.loc(npath)}")
        for name in spec.out:
            producers.setdefault(name, f"node '{spec.id}' at {doc.loc(npath)}")
        published.update([spec.id, *spec.out])
    for name, src in topo.outputs.items():
        if src not in published:
            out.append(doc.error(("topology", "outputs", name), f"output '{name}' names '{src}', which no node "
                                 f"produces; {did_you_mean(src, published)}"))
    out += _check_embeddings(m, doc, published)
    return out


def _check_embeddings(m: Manifest, doc: Document, published: set[str]) -> list[ManifestError]:
    """``embeddings``: a published value that inference computes, and a split the dataset has."""
    e = m.embeddings
    if e is None:
        return []
    out: list[ManifestError] = []
    names = set(m.topology.outputs) | published
    if e.output not in names:
        out.append(doc.error(("embeddings", "output"), f"{short(e.output)} is not a topology output "
                             f"nor a node's value; {did_you_mean(e.output, names)}"))
    elif (m.trainer is not None and e.output == m.trainer.loss) or e.output in m.metrics:
        out.append(doc.error(("embeddings", "output"), f"'{e.output}' is a loss or metric (a scalar "
                             "per batch); name a per-example value such as a hidden layer or the logits"))
    if m.trainer is None:
        out.append(doc.error(("embeddings",), "embeddings are written after a run trains; this manifest has no trainer"))
        return out
    ds_name = m.trainer.data or (next(iter(m.datasets)) if len(m.datasets) == 1 else None)
    spec = m.datasets.get(ds_name) if ds_name else None
    fractions = getattr(spec, "split", None)  # (a deeplake dataset's splits are known when it is read)
    if isinstance(fractions, Split) and getattr(fractions, e.split) == 0:
        out.append(doc.error(("embeddings", "split"), f"dataset '{ds_name}' has no {e.split} examples "
                             f"(its split.{e.split} is 0); choose a split it has or give it a share"))
    return out


def resolve_pretrained(topology: Topology, doc: Document) -> None:
    """Read a ``from_safetensors`` checkpoint's headers and config and make its model node; its
    inputs join the topology's (a declared input of the same name wins: e.g. other dims) and,
    with no ``outputs`` given, the model's outputs are the topology's."""
    fs = topology.from_safetensors
    if fs is None or topology.pretrained is not None:
        return
    from caramba.manifest.pretrained import resolve

    if fs.dtype is not None:
        if "dtype" in topology.model_fields_set and topology.dtype != fs.dtype:
            raise doc.error(("topology", "from_safetensors", "dtype"), f"from_safetensors.dtype {fs.dtype} disagrees "
                            f"with topology.dtype {topology.dtype}; give one of them")
        topology.dtype = fs.dtype
    res = resolve(fs, doc, topology.dtype)
    topology._pretrained = res
    topology.inputs = {**res.inputs, **topology.inputs}
    if not topology.outputs:
        topology.outputs = {name: (res.node_id if i == 0 else name) for i, name in enumerate(res.outputs)}


def _data_path(doc: Document, loc: tuple) -> tuple:
    """Map pydantic's error loc (which may contain union tags) onto a path in the data."""
    out: list[Any] = []
    cur = doc.data
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, dict) and isinstance(part, str) and part.endswith("_") and part[:-1] in cur:
            out.append(part[:-1])  # field names like in_ for the key `in`
            cur = cur[part[:-1]]
    return tuple(out)


def _to_manifest_error(doc: Document, exc: ValidationError) -> ManifestError:
    """Every independent problem pydantic found, each at its own line, as one ManifestError.

    The first is the deepest problem (the most specific one; what ``line``/``path`` report);
    the others follow in file order. A problem at a value that also has a deeper problem (a
    union's alternatives, an enclosing mapping) is left out: the deeper one says more."""
    found: list[tuple[tuple, ManifestError]] = []
    for e in exc.errors(include_url=False):
        key, err = _one_error(doc, e)
        if all(k != key for k, _ in found):
            found.append((key, err))
    keep = [(k, err) for k, err in found if not any(len(o) > len(k) and o[: len(k)] == k for o, _ in found)]
    first = max(keep, key=lambda ke: len(ke[0]))
    rest = sorted((ke for ke in keep if ke is not first),
                  key=lambda ke: (ke[1].line or 0, ke[1].col or 0) if ke[1].loc else (0, 0))
    return ManifestError.combine([first[1], *(err for _, err in rest)])


def _one_error(doc: Document, first: Any) -> tuple[tuple, ManifestError]:
    """One pydantic error as (the data path it is about, a located ManifestError)."""
    path = _data_path(doc, tuple(first["loc"]))
    kind = first["type"]
    msg = first["msg"]
    if kind == "unknown_key":
        key = first["ctx"]["key"]
        path = (*path, key)
        return path, ManifestError(msg, loc=doc.loc(path, key=True), path=format_path(path))
    about = path
    if kind == "missing":
        field = first["loc"][-1]
        msg = f"missing required key '{field}'"
        about = (*path, field)
    elif kind == "union_tag_invalid":
        tag = first["ctx"].get("tag")
        expected = first["ctx"].get("expected_tags", "")
        msg = f"unknown source {tag!r}; valid: {expected}"
        path = (*path, "source") if isinstance(doc.get(path), dict) and "source" in doc.get(path) else path
        about = path
    elif kind == "union_tag_not_found":
        msg = "missing required key 'source' (one of: sklearn, generated, npz, csv, text)"
    elif kind == "string_pattern_mismatch":
        value = doc.get(path)
        msg = f"{short(value)} is not a valid name (letters, digits and _, not starting with a digit)"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif "input" in first and not isinstance(first["input"], (dict, list)):
        msg = f"{msg}, got {short(first['input'])}"
    return about, ManifestError(msg, loc=doc.loc(path), path=format_path(path))


def is_name(s: str) -> bool:
    return bool(re.match(IDENT, s))


__all__ = [
    "Arm", "CausalLinearData", "Checkpoints", "CsvData", "DatasetSpec", "DeeplakeData", "Embeddings", "FromSafetensors", "SklearnData", "GeneratedData", "HawkesData", "InputSpec", "LoraSpec",
    "Manifest", "ModelSpec", "NodeSpec", "NpzData", "OptimizerSpec", "Run", "Schedule", "Split", "Strict", "Target", "TextData", "Topology",
    "Trainer", "Tuner", "validate",
]
