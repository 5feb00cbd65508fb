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
    kind: Literal["blobs", "spirals", "xor", "regression", "tones"] = "blobs"
    n: int = Field(1000, ge=2, le=MAX_EXAMPLES)
    features: int = Field(2, ge=1, le=MAX_DATA_VALUES)
    classes: int = Field(2, ge=2, le=MAX_CLASSES)
    noise: float = Field(0.1, ge=0, le=1e6)
    length: int = Field(256, ge=1, le=MAX_DATA_VALUES, description="samples per waveform (tones)")

    @model_validator(mode="after")
    def _size(self) -> "GeneratedData":
        width = {"blobs": self.features, "regression": self.features, "tones": self.length}.get(self.kind, 2)
        for what, values in ((f"n * {'length' if self.kind == 'tones' else 'features'}", self.n * width),
                             ("classes * features", self.classes * self.features if self.kind == "blobs" else 0)):
            if values > MAX_DATA_VALUES:
                raise ValueError(f"a generated dataset of {what} = {values:,} values is over the limit of "
                                 f"{MAX_DATA_VALUES:,}; use fewer examples or a local npz file")
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
    vocab_size: int | None = Field(default=None, ge=256, le=MAX_DIM, description="tokens of the trained BPE")
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

    @model_validator(mode="after")
    def _fits(self) -> "TextData":
        t = self.tokenizer
        if t is not None and t.vocab_size is not None and self.vocab_size is not None and self.vocab_size < t.vocab_size:
            raise ValueError(f"vocab_size {self.vocab_size} is smaller than the tokenizer's vocab_size {t.vocab_size}")
        return self

    @field_validator("encoding")
    @classmethod
    def _codec(cls, v: str) -> str:
        import codecs

        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown text encoding {v!r} (e.g. utf-8, latin-1)") from None
        return v


DatasetSpec = Annotated[SklearnData | GeneratedData | NpzData | CsvData | TextData, Field(discriminator="source")]


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


class Tuner(Strict):
    metric: str = "val.loss"
    mode: Literal["min", "max"] = "min"
    arms: list[Arm] = Field(min_length=1, max_length=MAX_ARMS)

    @field_validator("arms")
    @classmethod
    def _unique_arms(cls, v: list[Arm]) -> list[Arm]:
        ids = [a.id for a in v]
        if len(set(ids)) != len(ids):
            raise ValueError(f"tuner arm ids must be unique, got {ids}")
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


# ---- validation errors -> ManifestError ---------------------------------------------------


def validate(doc: Document) -> Manifest:
    """Check ``doc`` against the schema; the first problem becomes a located ManifestError."""
    if not isinstance(doc.data, dict):
        raise doc.error((), "a manifest must be a mapping of sections")
    try:
        m = Manifest.model_validate(doc.data)
    except ValidationError as exc:
        raise _to_manifest_error(doc, exc) from None
    resolve_pretrained(m.topology, doc)
    return m


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
    errors = exc.errors(include_url=False)
    # Prefer the deepest error: it is the most specific one.
    first = max(errors, key=lambda e: len(_data_path(doc, tuple(e["loc"]))))
    path = _data_path(doc, tuple(first["loc"]))
    kind = first["type"]
    msg = first["msg"]
    if kind == "unknown_key":
        key = first["ctx"]["key"]
        path = (*path, key)
        return ManifestError(msg, loc=doc.loc(path, key=True), path=format_path(path))
    if kind == "missing":
        field = first["loc"][-1]
        msg = f"missing required key '{field}'"
    elif kind == "union_tag_invalid":
        tag = first["ctx"].get("tag")
        expected = first["ctx"].get("expected_tags", "")
        msg = f"unknown source {tag!r}; valid: {expected}"
        path = (*path, "source") if isinstance(doc.get(path), dict) and "source" in doc.get(path) else path
    elif kind == "union_tag_not_found":
        msg = "missing required key 'source' (one of: sklearn, generated, npz, csv, text)"
    elif kind == "string_pattern_mismatch":
        value = doc.get(path)
        msg = f"{short(value)} is not a valid name (letters, digits and _, not starting with a digit)"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif "input" in first and not isinstance(first["input"], (dict, list)):
        msg = f"{msg}, got {short(first['input'])}"
    more = len(errors) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ManifestError(msg, loc=doc.loc(path), path=format_path(path))


def is_name(s: str) -> bool:
    return bool(re.match(IDENT, s))


__all__ = [
    "Arm", "Checkpoints", "CsvData", "DatasetSpec", "FromSafetensors", "SklearnData", "GeneratedData", "InputSpec", "LoraSpec",
    "Manifest", "ModelSpec", "NodeSpec", "NpzData", "OptimizerSpec", "Run", "Schedule", "Split", "Strict", "Target", "TextData", "Topology",
    "Trainer", "Tuner", "validate",
]
