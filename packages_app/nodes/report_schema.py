"""Pure: the node report request/response bodies as pydantic models, and JSON-tree safety checks.

No Django and no I/O here: web/api.py parses bytes into JSON, then these models decide what is valid.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from packages_app import report_metrics

MAX_BATCH = 500
MAX_DEPTH = 16  # real reports nest 4 deep; the cap keeps a hostile body from exhausting the stack
# Plausibility bounds (a timings value outside them is stored and flagged, never refused): the
# metrics table, packages_app.report_metrics.
# Hard limits: a report past them is refused (400) naming the limit. Real timings are ~3 KiB.
MAX_TIMINGS_BYTES = 16 * 1024
MAX_TIMING_KEY_CHARS = 100
MAX_TIMING_STRING = 200
MAX_TIMING_ARRAY = 256
MAX_HARDWARE_BYTES = 4 * 1024
MAX_TIMING_KEYS = 512
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


class BodyError(ValueError):
    """A request body that cannot be accepted: one sentence, and the dotted path of the culprit."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


# --- Field types ------------------------------------------------------------------------------

StrictInt = Annotated[int, Strict()]
# Strict floats take integers too: an integral f64 may arrive as 20 from a node that is not serde.
StrictNumber = Annotated[float, Strict()]
Text100 = Annotated[str, Strict(), Field(min_length=1, max_length=100)]
Strategy = Annotated[str, Strict(), Field(pattern=r"^[a-z0-9][a-z0-9+._-]{0,63}$")]


def _check_repo_id(value: str) -> str:
    # The Hub's rules beyond the character set (docs/domain.md section 8); pydantic regexes lack lookahead.
    if "--" in value or ".." in value or value.endswith(".git"):
        raise PydanticCustomError("repo_id", "A repo id must not contain '--' or '..' nor end in '.git'")
    return value


RepoId = Annotated[
    str,
    Strict(),
    Field(max_length=96, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]*/[A-Za-z0-9_-][A-Za-z0-9._-]*$"),
    AfterValidator(_check_repo_id),
]
CommitSha = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{40}$")]
Sha256Hex = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{64}$")]


def _require_string(value: object) -> object:
    # Pydantic would also take a unix number for a datetime; the contract says RFC 3339 text.
    if not isinstance(value, str):
        raise PydanticCustomError("rfc3339", "Input should be an RFC 3339 timestamp string")
    return value


def _check_plausible_time(value: datetime) -> datetime:
    if not EARLIEST <= value <= LATEST:
        raise PydanticCustomError("implausible_time", "Timestamp should be between 2000 and 2100")
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_require_string), AfterValidator(_check_plausible_time)]


# --- Request ----------------------------------------------------------------------------------


class StrictModel(BaseModel):
    """A request body's part: unknown keys, NaN and infinities refused; frozen once validated."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class PackageRef(StrictModel):
    repo: RepoId = Field(examples=["meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"])
    revision: CommitSha = Field(description="The 40-hex commit the node loaded.")
    manifest_sha256: Sha256Hex | None = Field(default=None, description="sha256 of model-package.json.")


class Stage(StrictModel):
    node: Text100
    layer_start: Annotated[int, Strict(), Field(ge=0, le=99_999)]
    layer_end: Annotated[int, Strict(), Field(ge=1, le=99_999)] = Field(description="Half-open end.")
    device: Text100 | None = None
    stage_index: Annotated[int, Strict(), Field(ge=0, le=63)] | None = None

    @model_validator(mode="after")
    def _check_range(self) -> Stage:
        if self.layer_end <= self.layer_start:
            raise PydanticCustomError("stage_range", "layer_end should be greater than layer_start")
        return self


class Topology(StrictModel):
    topology_id: Annotated[str, Strict(), Field(max_length=200)] = ""
    stages: list[Stage] = Field(default_factory=list, max_length=16)

    def stage_splits(self) -> str:
        """The split as the dashboard shows it, e.g. ``0..27|27..41``, in layer order."""
        ranges = sorted((s.layer_start, s.layer_end) for s in self.stages)
        return "|".join(f"{start}..{end}" for start, end in ranges)


class Speculative(StrictModel):
    requested_strategy: Strategy | None = Field(default=None, examples=["auto"])
    effective_strategy: Strategy | None = Field(default=None, examples=["native-mtp", "disabled"])
    mtp_source: Literal["Disabled", "Integrated", "External"] | None = None


TIMINGS_DOC = """The ``timings`` object of a mesh-llm response, every key kept with its JSON type.

A real node's ``timings`` is a free-form map (docs/node-report.md section 1): integers, floats, booleans,
strings, ``null`` (serde writes NaN and infinities as null) and arrays of numbers. Known keys are
typed, never bounded: a value outside plausible bounds is kept and named by ``implausible_keys``,
so the report is stored, flagged, and the value left out of medians. Only the hard limits below
refuse a report, because no real node comes near them.
"""


class TimingsBase(BaseModel):
    """What every ``timings`` model does; its typed fields come from the metrics table (build_timings)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _check_size(cls, data: Any) -> Any:
        if isinstance(data, dict) and (
            len(data) > MAX_TIMING_KEYS or len(canonical_json(data)) > MAX_TIMINGS_BYTES
        ):
            raise PydanticCustomError("too_large", "timings should be at most 16 KiB and 512 keys")
        return data

    @model_validator(mode="after")
    def _check_unknown_counters(self) -> TimingsBase:
        for key, value in (self.model_extra or {}).items():
            if len(key) > MAX_TIMING_KEY_CHARS or not _is_counter_value(value):
                raise PydanticCustomError(
                    "timing_counter",
                    "A timings value should be a number, a boolean, null, a string of at most 200 "
                    "characters or a list of at most 256 numbers, under a key of at most 100 characters",
                    {"key": key},
                )
        return self

    def implausible_keys(self) -> list[str]:
        """Known keys whose value is outside plausible bounds, or contradicts another counter, sorted:
        kept, flagged, not aggregated."""
        values = self.model_dump(include=set(PLAUSIBLE))
        alone = {key for key, value in values.items() if value is not None and not _plausible(key, value)}
        return sorted(alone | self._contradicted())

    def plausible(self, key: str) -> Any:
        """The value of a known key, or None when it is absent or implausible (what medians may use)."""
        value = getattr(self, key)
        if value is None or not _plausible(key, value):
            return None
        return None if key in PAIRED_KEYS and key in self._contradicted() else value

    def _contradicted(self) -> set[str]:
        # An acceptance rate is accepted / proposed: more accepted than proposed, or accepted with no
        # proposed count beside it, would show as "Acceptance rate 1e14 %". Both sides are flagged.
        out: set[str] = set()
        for accepted, proposed in ACCEPTED_OF:
            took, offered = getattr(self, accepted), getattr(self, proposed)
            if took is not None and (offered is None or took > offered):
                out |= {accepted} if offered is None else {accepted, proposed}
        return out


PLAUSIBLE: dict[str, tuple[float, float]] = report_metrics.plausible_bounds()
# The pydantic type of each metric type of the table: integers exactly; floats take integers too.
FIELD_TYPES: dict[str, Any] = {"int": StrictInt, "float": StrictNumber}


def timings_fields(metrics: Sequence[report_metrics.ReportMetric] | None = None) -> dict[str, Any]:
    """The typed ``timings`` fields, one per metric of the table that a node sends (not derived ones),
    in the table's order: optional, unbounded (a value outside the bound is flagged, not refused)."""
    table = report_metrics.METRICS if metrics is None else metrics
    return {
        m.name: (
            FIELD_TYPES[m.type] | None,
            Field(default=None, description=_describe(m)),
        )
        for m in table
        if not m.derived
    }


def _describe(metric: report_metrics.ReportMetric) -> str:
    unit = "" if metric.unit in metric.label else f", in {metric.unit}"
    bound = ""
    if metric.bound is not None:
        low, high = metric.bound
        bound = f" Outside {low:g}..{high:g} it is stored and flagged, not refused."
    return f"{metric.label}{unit}.{bound}"


def build_timings(metrics: Sequence[report_metrics.ReportMetric] | None = None) -> type[TimingsBase]:
    """The ``timings`` model for a metrics table (the module's Timings is built from the real one)."""
    return create_model(
        "Timings",
        __base__=TimingsBase,
        __module__=__name__,
        __doc__=TIMINGS_DOC,
        **timings_fields(metrics),
    )


if TYPE_CHECKING:
    Timings = TimingsBase
else:
    Timings = build_timings()


# (accepted, proposed): counters that must agree, as the node derives one from the other.
ACCEPTED_OF = report_metrics.agreeing_pairs()
PAIRED_KEYS = frozenset(key for pair in ACCEPTED_OF for key in pair)


def _plausible(key: str, value: float) -> bool:
    low, high = PLAUSIBLE[key]
    return low <= value <= high


def _is_counter_value(value: object) -> bool:
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= MAX_TIMING_STRING
    if isinstance(value, list):
        # verify_window_occupancy_ms_by_depth holds pipeline depth + 1 entries (depth up to 64);
        # serde writes a NaN entry as null.
        return len(value) <= MAX_TIMING_ARRAY and all(v is None or _is_number(v) for v in value)
    return False


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_hardware_size(value: dict[str, Any]) -> dict[str, Any]:
    # The one free-form object: bound its depth too (every other part has a typed shape).
    if nesting_depth(value) > MAX_DEPTH // 2:
        raise PydanticCustomError("too_deep", "hardware should nest at most 8 levels")
    if len(canonical_json(value)) > MAX_HARDWARE_BYTES:
        raise PydanticCustomError("too_large", "hardware should be at most 4 KiB")
    return value


def nesting_depth(value: Any, level: int = 0) -> int:
    """How many levels of objects and lists a JSON value nests (counting stops past MAX_DEPTH)."""
    if level > MAX_DEPTH or not isinstance(value, dict | list):
        return level
    children = value.values() if isinstance(value, dict) else value
    return max((nesting_depth(child, level + 1) for child in children), default=level)


class ReportIn(StrictModel):
    """One timing report as a node posts it."""

    report_id: uuid.UUID = Field(description="Chosen by the node; a replay with the same id is a no-op.")
    observed_at: Timestamp = Field(description="RFC 3339, with an offset; when the node measured.")
    package: PackageRef
    topology: Topology | None = None
    speculative: Speculative | None = None
    hardware: Annotated[dict[str, Any], AfterValidator(_check_hardware_size)] | None = Field(
        default=None, description="A small free-form object (device names, memory, driver...)."
    )
    timings: Timings = Field(description="The response's timings object, as the node emits it.")


class BatchIn(StrictModel):
    # Items stay untyped here so that one bad item is refused alone, with its own result.
    reports: list[Any] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"1 to {MAX_BATCH} report objects.",
        json_schema_extra={"items": {"$ref": "#/components/schemas/ReportIn"}},
    )


# --- Baseline engines: a plain llama.cpp / vLLM server's counters over one window (meshdash-agent) ---

MAX_BASELINE_BATCH = 100
BaselineCount = Annotated[int, Strict(), Field(ge=0, le=10**15)]
MAX_BASELINE_TPS = 100_000.0  # a decode rate past this is flagged, not aggregated


class BaselineFigures(StrictModel):
    """The window's counter deltas (packages_app.nodes.exposition.figures); None where the engine does not
    publish the series."""

    predicted_n: BaselineCount | None = None
    predicted_seconds: Annotated[float, Strict(), Field(ge=0, le=1e9)] | None = None
    predicted_per_second: Annotated[float, Strict(), Field(ge=0)] | None = Field(
        default=None,
        description="Recomputed by meshdash from predicted_n / predicted_seconds when both are sent.",
    )
    drafts: BaselineCount | None = None
    draft_tokens: BaselineCount | None = None
    accepted_tokens: BaselineCount | None = None
    accepted_per_position: list[BaselineCount] | None = Field(default=None, max_length=32)


class BaselineReportIn(StrictModel):
    """One window of a baseline engine's /metrics, as meshdash-agent scrapes it."""

    report_id: uuid.UUID
    observed_at: Timestamp
    window_seconds: Annotated[float, Strict(), Field(gt=0, le=366 * 86400)]
    engine: Literal["llama.cpp", "vllm"]
    engine_version: Annotated[str, Strict(), Field(max_length=100)] = ""
    served_model: Annotated[str, Strict(), Field(max_length=300)] = ""
    source_model: RepoId = Field(description="The Hub repo of the GGUF or weights the engine serves.")
    source_file: Annotated[str, Strict(), Field(max_length=300)] = ""
    quantization: Annotated[str, Strict(), Field(max_length=64)] = ""
    counter_reset: Annotated[bool, Strict()] = False
    figures: BaselineFigures
    not_reported: list[Annotated[str, Strict(), Field(max_length=64)]] = Field(
        default_factory=list, max_length=16
    )
    trimmed: list[Annotated[str, Strict(), Field(max_length=200)]] = Field(
        default_factory=list, max_length=16
    )

    def flagged(self) -> list[str]:
        """What contradicts itself (kept, shown, left out of the speedup): more accepted than drafted, more
        drafts than draft tokens, a position accepted more often than there were drafts, or a decode rate no
        engine reaches."""
        f, out = self.figures, []
        if f.accepted_tokens is not None and (f.draft_tokens is None or f.accepted_tokens > f.draft_tokens):
            out.append("accepted_tokens")
        if f.drafts is not None and f.draft_tokens is not None and f.drafts > f.draft_tokens:
            out.append("drafts")
        if f.accepted_per_position and (f.drafts is None or max(f.accepted_per_position) > f.drafts):
            out.append("accepted_per_position")
        rate = self.decode_rate()
        if rate is not None and rate > MAX_BASELINE_TPS:
            out.append("predicted_per_second")
        return out

    def decode_rate(self) -> float | None:
        """Tokens over decode seconds when both are sent (the counters), else the rate sent."""
        f = self.figures
        if f.predicted_n is not None and f.predicted_seconds:
            return f.predicted_n / f.predicted_seconds
        return f.predicted_per_second


class BaselinesIn(StrictModel):
    reports: list[Any] = Field(
        min_length=1,
        max_length=MAX_BASELINE_BATCH,
        description=f"1 to {MAX_BASELINE_BATCH} baseline reports.",
    )


# --- Responses (documented in the OpenAPI schema; the views build plain dicts of this shape) --


class ReportAccepted(BaseModel):
    id: int = Field(description="The stored report's id.")
    duplicate: bool = Field(description="True when this report_id was already stored with this body.")


class ErrorOut(BaseModel):
    error: str = Field(description="One sentence saying what is wrong.")
    field: str | None = Field(default=None, description="Dotted path of the culprit, e.g. timings.prompt_ms.")


class BatchItemResult(BaseModel):
    index: int
    status: Literal[200, 201, 400, 409] = Field(description="What the single endpoint would answer.")
    id: int | None = None
    duplicate: bool | None = None
    error: str | None = None
    field: str | None = None


class BatchOut(BaseModel):
    results: list[BatchItemResult]


# --- Helpers the endpoint uses ----------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """Key-sorted, whitespace-free UTF-8: equal for bodies that differ only in layout."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def check_json_tree(value: Any, path: str = "", depth: int = 0) -> None:
    """Refuse what JSON allows but storage does not: deep nesting, NUL, lone surrogates, inf."""
    if depth > MAX_DEPTH:
        raise BodyError(f"The body nests deeper than {MAX_DEPTH} levels.", path)
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BodyError("Numbers must be finite.", path)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            _check_text(key, child)
            check_json_tree(item, child, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_tree(item, f"{path}.{index}" if path else str(index), depth + 1)


# PostgreSQL text and jsonb cannot hold NUL, and UTF-8 cannot encode a lone surrogate.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _check_text(text: str, path: str) -> None:
    if _UNSTORABLE.search(text):
        raise BodyError("Strings must not contain NUL characters or lone surrogates.", _safe(path))


def _safe(path: str) -> str:
    return path.encode("utf-8", "replace").decode().replace("\x00", "?")


def validate_report_body(data: Any, prefix: str = "") -> tuple[ReportIn, str]:
    """The validated report and the digest of its canonical body (what a verbatim replay repeats); on
    failure a BodyError naming the first bad field."""
    return _validated_body(ReportIn, "A report", data, prefix)


def validate_baseline(data: Any, prefix: str) -> tuple[BaselineReportIn, str]:
    """One baseline report and the digest of its canonical body."""
    return _validated_body(BaselineReportIn, "A baseline report", data, prefix)


_Body = TypeVar("_Body", bound=BaseModel)


def _validated_body(model: type[_Body], what: str, data: Any, prefix: str) -> tuple[_Body, str]:
    if not isinstance(data, dict):
        raise BodyError(f"{what} must be a JSON object.", prefix)
    digest = storable_digest(data, prefix)
    try:
        return model.model_validate(data), digest
    except ValidationError as exc:
        raise first_error(exc, prefix) from None


# In canonical JSON, NUL can only appear escaped and non-finite numbers only as these tokens.
_SUSPECT_TOKENS = (b"\\u0000", b"Infinity", b"NaN")


def storable_digest(data: Any, path: str = "") -> str:
    """Digest of the canonical body, refusing what storage cannot hold.

    Walking every string costs more than the rest of validation, so the tree is walked only when
    the canonical bytes hint at a problem (or cannot be made, e.g. for a lone surrogate).
    """
    try:
        canonical: bytes | None = canonical_json(data)
    except (UnicodeEncodeError, RecursionError):
        canonical = None
    if canonical is None or any(token in canonical for token in _SUSPECT_TOKENS):
        check_json_tree(data, path)  # raises naming the culprit, unless the hint was a false alarm
    if canonical is None:
        raise BodyError("The report cannot be stored as JSON.", path)
    return hashlib.sha256(canonical).hexdigest()


def validate_batch(data: Any) -> list[Any]:
    return validate_list(data, BatchIn, "reports")


def validate_baselines(data: Any) -> list[Any]:
    return validate_list(data, BaselinesIn, "reports")


def validate_list(data: Any, model: type[BaseModel], key: str) -> list[Any]:
    """The still-untyped items of a ``{key: [...]}`` body, so each is judged (and refused) alone."""
    if not isinstance(data, dict):
        raise BodyError(f'The body must be a JSON object like {{"{key}": [...]}}.')
    try:
        items: list[Any] = getattr(model.model_validate(data), key)
    except ValidationError as exc:
        raise first_error(exc, "") from None
    return items


def first_error(exc: ValidationError, prefix: str) -> BodyError:
    """The first of pydantic's errors as one sentence and the dotted path of its field."""
    error = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "timing_counter":
        loc.append(str(error.get("ctx", {}).get("key", "")))
    field = ".".join(([prefix] if prefix else []) + loc)
    return BodyError(_sentence(error["type"], error["msg"], loc), _safe(field))


def _sentence(kind: str, msg: str, loc: list[str]) -> str:
    name = repr(loc[-1]) if loc else "the body"
    if kind == "extra_forbidden":
        return f"Unknown key {_safe(name)} is not allowed."
    if kind == "missing":
        return f"Missing required key {name}."
    return f"{_safe(name)}: {msg}."
