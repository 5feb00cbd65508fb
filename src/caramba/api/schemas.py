"""Request and response models of the HTTP API (they are what the OpenAPI spec shows)."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

T = TypeVar("T")

MAX_MANIFEST_CHARS = 512_000
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$"  # a plain file name: no folders, no leading dot


class Page(BaseModel, Generic[T]):
    """One page of a list: ``items``, the ``total`` matching the filter, and the paging used."""

    items: list[T]
    total: int
    limit: int
    offset: int


class ErrorItem(BaseModel):
    type: str
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    path: str | None = None
    node: str | None = None
    op: str | None = None
    backend: str | None = None
    hint: str | None = None


class ErrorBody(BaseModel):
    detail: str
    type: str | None = None
    errors: list[ErrorItem] = []


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such object"},
    422: {"model": ErrorBody, "description": "invalid input; manifest errors carry file, line, col and path"},
}
# What any state-changing call may answer besides its own errors.
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "the body could not be parsed"},
    401: {"model": ErrorBody, "description": "missing or wrong token"},
    411: {"model": ErrorBody, "description": "a body of undeclared size"},
    413: {"model": ErrorBody, "description": "request body over the size limit"},
}


# What the routes that check a manifest may also answer.
BUSY: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorBody, "description": "every validation worker is busy; retry after Retry-After seconds"},
}


def unicode_problem(value: Any, where: str = "") -> str | None:
    """Where in ``value`` (a JSON body) a string holds a lone surrogate, which is not Unicode
    text (JSON's ``\\ud800`` escape decodes to one); None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{where or 'the body'}: position {exc.start} holds a lone surrogate, which is not valid Unicode text"
        return None
    items: Any = ()
    if isinstance(value, dict):
        items = [(str(k), k) for k in value] + [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [(f"[{i}]", v) for i, v in enumerate(value)]
    for key, v in items:
        found = unicode_problem(v, f"{where}.{key}".lstrip(".") if not key.startswith("[") else where + key)
        if found:
            return found
    return None


class TextBody(BaseModel):
    """A request body whose strings must be Unicode text (no lone surrogates): they are written
    to files, passed to YAML and stored, and each of those would fail on one."""

    @model_validator(mode="before")
    @classmethod
    def _unicode_only(cls, data: Any) -> Any:
        problem = unicode_problem(data)
        if problem:
            raise ValueError(problem)
        return data


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    uptime_s: float
    auth: bool = Field(description="whether state-changing calls can be authorized (a token is configured)")


class BackendInfo(BaseModel):
    name: str
    available: bool
    location: str | None = None
    reason: str | None = None
    install_hint: str | None = None
    versions: dict[str, str] = {}
    details: dict[str, str] = {}
    options: list[dict[str, Any]] = []


class ManifestIn(TextBody):
    """A manifest as YAML text. ``name`` is how errors refer to it (default ``manifest.yml``);
    ``overrides`` are ``dotted.path=value`` items applied like ``--set``."""

    model_config = ConfigDict(extra="forbid")

    manifest: str = Field(max_length=MAX_MANIFEST_CHARS, description="the manifest's YAML text")
    name: str = Field("manifest.yml", max_length=200, pattern=NAME_PATTERN, description="a file name, no folders")
    overrides: list[str] = Field(default_factory=list, max_length=64)


class ValidationOut(BaseModel):
    valid: Literal[True] = True
    name: str
    summary: dict[str, Any]
    rendered: str = Field(description="the expanded manifest as YAML")


class CompileIn(TextBody):
    """Compile a manifest's topology, or an IR graph in the ``caramba.ir`` JSON format."""

    model_config = ConfigDict(extra="forbid")

    manifest: str | None = Field(None, max_length=MAX_MANIFEST_CHARS)
    name: str = Field("manifest.yml", max_length=200, pattern=NAME_PATTERN)
    graph: dict[str, Any] | None = Field(None, description="an IR graph as written by caramba.ir.dumps")
    backend: str = Field("cpu", max_length=200, description="a backend config string, e.g. cpu:threads=2")
    dims: dict[str, int] = Field(default_factory=dict, max_length=32,
                                 description="sizes of symbolic dimensions (default: batch = trainer.batch_size)")
    disable: list[str] = Field(default_factory=list, max_length=32, description="passes to disable by name")
    svg: bool = Field(True, description="include SVG drawings of the graph before and after")


class StageOut(BaseModel):
    name: str
    changed: bool
    skipped: bool
    diagnostics: list[str]
    nodes_before: int
    nodes_after: int
    ms: float


class GraphOut(BaseModel):
    name: str
    nodes: int
    text: str
    svg: str | None = None


class CompileOut(BaseModel):
    backend: str
    stages: list[StageOut]
    report: str
    before: GraphOut
    after: GraphOut


RunStatus = Literal["created", "running", "paused", "finished", "failed", "cancelled", "interrupted"]


class RunOut(BaseModel):
    """A run: where it stands (``step`` of ``steps``), what it ran on, and its summary metrics."""

    id: str
    experiment: str
    status: RunStatus
    target: str = ""
    name: str = ""
    group_id: str = ""
    arm: str = ""
    seed: int = 0
    backend: str = ""
    created: float
    started: float | None = None
    finished: float | None = None
    step: int = 0
    steps: int = 0
    summary: dict[str, Any] = {}
    error: str | None = None
    manifest_sha256: str | None = None
    live: bool = Field(False, description="executing in this server (so it can be paused, resumed or cancelled)")
    executor: Literal["local", "actors"] = "local"
    ledger_run: str | None = Field(None, description="the run's subject in the Notary's ledger (actor runs)")
    tags: list[str] = Field(default_factory=list, description="set with POST /runs/{id}/tags")
    note: str = Field("", description="set with PUT /runs/{id}/note")


class ExperimentOut(BaseModel):
    name: str
    runs: int
    statuses: dict[str, int]
    updated: float
    latest_run: str


class MetricPoint(BaseModel):
    step: int
    split: str
    name: str
    value: float | None = Field(description="null when not finite (see repr)")
    repr: str | None = None


class MetricsOut(BaseModel):
    points: list[MetricPoint]
    cursor: str = Field(description="pass as ?cursor= (or Last-Event-ID on the stream) to get only newer points")


class ArtifactOut(BaseModel):
    name: str
    kind: str
    sha256: str
    size: int
    url: str


class SubmitIn(ManifestIn):
    """A manifest to run. ``targets`` picks targets by name (default: all); ``runs`` picks run
    IDs within them (default: all)."""

    targets: list[str] = Field(default_factory=list, max_length=64)
    runs: list[str] = Field(default_factory=list, max_length=256)
    executor: Literal["local", "actors"] = Field(
        "local",
        description="local: the experiment runner in a server thread (metrics every log_every steps, "
        "evaluations, plots); actors: an Experiment actor per run (evidence to the Notary, a verified "
        "result becomes a model version; metrics reach the store at each checkpoint)",
    )


class PlannedRun(BaseModel):
    label: str
    target: str
    run: str
    arm: str = ""
    backend: str
    seed: int
    steps: int


class SubmitOut(BaseModel):
    experiment: str
    group_id: str = Field(description="filter GET /runs by it to follow every run of this submission")
    planned: list[PlannedRun]
    runs: list[RunOut] = Field(description="the runs recorded so far (they start one after another)")


MAX_PROMPT_CHARS = 65_536
MAX_GENERATE_TOKENS = 1024
MAX_GENERATE_CAPACITY = 8192


class GenerateIn(TextBody):
    """Continue ``prompt`` with a language model: a Hugging Face folder under the server's data
    roots (``serve_data_roots``) or a run in its store (a character-level text run). Sampler
    settings as in ``caramba generate`` (temperature 0: greedy)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=4096, description="a checkpoint folder under the data roots, or a run ID")
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    max_new_tokens: int = Field(64, ge=1, le=MAX_GENERATE_TOKENS)
    temperature: float = Field(0.0, ge=0.0, le=100.0, allow_inf_nan=False)
    top_k: int = Field(0, ge=0, le=1 << 20)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    min_p: float = Field(0.0, ge=0.0, lt=1.0, allow_inf_nan=False)
    repetition_penalty: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)
    seed: int = Field(0, ge=0, le=(1 << 63) - 1)
    backend: str = Field("cpu", max_length=200, pattern=r"^[A-Za-z0-9_:=,.\-]+$")
    capacity: int | None = Field(None, ge=1, le=MAX_GENERATE_CAPACITY, description="KV-cache positions")
