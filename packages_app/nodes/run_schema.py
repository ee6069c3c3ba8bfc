"""Pure: the run registration body meshdash-agent posts (a run, its stages, what the node says about itself)
as pydantic models.

Moved out of report_schema.py, which keeps the report and baseline bodies and the checks every body
shares. No Django and no I/O here: web/api_telemetry.py parses bytes into JSON, then these models decide
what is valid.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from packages_app.nodes.report_schema import (
    MAX_DEPTH,
    MAX_HARDWARE_BYTES,
    BaselineCount,
    BodyError,
    PackageRef,
    StrictModel,
    canonical_json,
    check_json_tree,
    first_error,
    nesting_depth,
    validate_list,
)

UNCERTIFIED_OVERRIDE = "uncertified_override"
MAX_RAW_STAGE_BYTES = 4 * 1024  # one stage object as the console API lists it (about 1 KiB in practice)


def _check_devices(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    too_deep = nesting_depth(value) > MAX_DEPTH // 2
    if len(value) > 64 or too_deep or len(canonical_json(value)) > MAX_HARDWARE_BYTES:
        raise PydanticCustomError("too_large", "devices should be at most 64 entries and 4 KiB")
    return value


def _check_raw_stage(value: dict[str, Any]) -> dict[str, Any]:
    if nesting_depth(value) > MAX_DEPTH // 2 or len(canonical_json(value)) > MAX_RAW_STAGE_BYTES:
        raise PydanticCustomError("too_large", "raw should be at most 4 KiB and 8 levels deep")
    return value


# --- Runs the node agent registers ------------------------------------------------------------

Text200 = Annotated[str, Strict(), Field(max_length=200)]


# --- What a node says about itself (docs/node-report.md section 5) -----------------------------
# Known keys are typed and bounded; unknown keys are kept as the node sent them, within the same byte
# and depth caps as a raw stage (an older or newer node's extra fields are normal). The agent trims a
# hostile group before sending it and names what it cut in ``Observations.trimmed``; what reaches here
# past these caps is refused naming the field, and the run's earlier registration is kept.
MAX_OBSERVED_BYTES = 8 * 1024  # one group (the serving strategy, the split readiness, ...): ~1 KiB real
MAX_OBSERVED_ITEMS = 32
Text64 = Annotated[str, Strict(), Field(max_length=64)]
Text600 = Annotated[str, Strict(), Field(max_length=600)]
Count = Annotated[int, Strict(), Field(ge=0, le=10**12)]


def _check_observed(value: Any) -> Any:
    if nesting_depth(value) > MAX_DEPTH // 2 or len(canonical_json(value)) > MAX_OBSERVED_BYTES:
        raise PydanticCustomError("too_large", "it should be at most 8 KiB and 8 levels deep")
    return value


class _Observed(BaseModel):
    """A group of what the node reports: its known keys typed, the others kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _check_size(cls, data: Any) -> Any:
        return _check_observed(data)


class StrategyDecision(_Observed):
    """One axis a serving strategy decided (``StrategyDecision`` in serving_strategy.rs)."""

    axis: Annotated[str, Strict(), Field(max_length=100)]
    value: Annotated[str, Strict(), Field(max_length=300)] = ""
    because: Text600 = ""


class ServingStrategy(_Observed):
    """``/api/status`` ``runtime.serving_strategy``: what ``--strategy`` composed (#2112)."""

    strategy: Text64 | None = None
    applied: list[StrategyDecision] = Field(default_factory=list, max_length=MAX_OBSERVED_ITEMS)
    declined: list[StrategyDecision] = Field(default_factory=list, max_length=MAX_OBSERVED_ITEMS)

    def speculative(self) -> str:
        """The ``speculative.strategy`` it set where the operator had left it unset, or ""."""
        return next((d.value for d in self.applied if d.axis == "speculative.strategy"), "")


class ReadinessBlocker(_Observed):
    reason: Annotated[str, Strict(), Field(max_length=100)] = ""
    count: Count = 0
    short_node_ids: list[Annotated[str, Strict(), Field(max_length=100)]] = Field(
        default_factory=list, max_length=MAX_OBSERVED_ITEMS
    )
    recommendation: Text600 = ""


class SplitReadiness(_Observed):
    """``GET /api/diagnostics/split-readiness?model_ref=``: whether a split can form, and why not."""

    model_ref: Annotated[str, Strict(), Field(max_length=300)] = ""
    verdict: Text64 = ""
    participant_count: BaselineCount | None = None
    exclusion_count: BaselineCount | None = None
    blockers: list[ReadinessBlocker] = Field(default_factory=list, max_length=MAX_OBSERVED_ITEMS)
    recommendations: list[Text600] = Field(default_factory=list, max_length=MAX_OBSERVED_ITEMS)


class ServingProvenance(_Observed):
    """The newest ``ServingProvenance`` of an ``openai.exchange.v1`` terminal event for the run's model,
    with the envelope's ``dispatch_path`` and ``usage`` beside it."""

    served_by_node_id: Text200 = ""
    model_canonical_ref: Annotated[str, Strict(), Field(max_length=300)] = ""
    model_revision: Text200 = ""
    weights_digest: Text200 = ""
    model_identity_hash: Text200 = ""
    dispatch_path: Text64 = ""


class StageAdmission(_Observed):
    """A stage snapshot's ``admission`` (``StageAdmissionDescriptor``): the exact package it loaded."""

    package_id: Text200 = ""
    plan_id: Text200 = ""


class Observations(StrictModel):
    """What the node said about itself when the agent registered the run (docs/node-report.md 5)."""

    serving_strategy: ServingStrategy | None = None
    twin_policy: Annotated[Any, AfterValidator(_check_observed)] = None
    draft_name: Annotated[str, Strict(), Field(max_length=300)] | None = None
    split_readiness: SplitReadiness | None = None
    provenance: ServingProvenance | None = None
    not_reported: list[Text64] = Field(
        default_factory=list,
        max_length=16,
        description="What this node's version does not report (older nodes): said so, never guessed.",
    )
    trimmed: list[Annotated[str, Strict(), Field(max_length=200)]] = Field(
        default_factory=list,
        max_length=64,
        description="What the agent cut or dropped from a hostile or oversized value: stored flagged.",
    )


class RunStage(StrictModel):
    """One stage of a run as the node's console API lists it (``GET /api/runtime/stages``)."""

    stage_id: Text200
    stage_index: Annotated[int, Strict(), Field(ge=0, le=1023)]
    node_id: Text200 = ""
    layer_start: Annotated[int, Strict(), Field(ge=0, le=99_999)]
    layer_end: Annotated[int, Strict(), Field(ge=0, le=99_999)]
    state: Text200 = ""
    device: Text200 = ""
    ctx_size: Annotated[int, Strict(), Field(ge=0)] | None = None
    lane_count: Annotated[int, Strict(), Field(ge=0)] | None = None
    certification: Annotated[str, Strict(), Field(max_length=64)] = Field(
        default="",
        description="The stage's split certification: certified, or uncertified_override when the node "
        "split-serves with --allow-uncertified-split; empty when the node does not say.",
    )
    weight_quantization: Annotated[str, Strict(), Field(max_length=64)] = ""
    raw: Annotated[dict[str, Any], AfterValidator(_check_raw_stage)] | None = Field(
        default=None, description="The stage object as the node's console API listed it (at most 4 KiB)."
    )
    admission: StageAdmission | None = Field(default=None, description="The package the stage loaded.")


class RunIn(StrictModel):
    """A run the agent saw on its node: the package (ref resolved to a commit) and the topology."""

    run_id: Annotated[str, Strict(), Field(min_length=1, max_length=200)]
    topology_id: Text200 = ""
    model_id: Text200 = ""
    package_ref: Annotated[str, Strict(), Field(max_length=300)] = Field(
        default="", description="As the node names it, e.g. meshllm/Qwen3.5-...-layers@main."
    )
    package: PackageRef | None = Field(default=None, description="The ref resolved to a 40-hex commit.")
    version: Annotated[str, Strict(), Field(max_length=100)] = Field(default="", description="/api/status")
    stages: list[RunStage] = Field(default_factory=list, max_length=64)
    devices: Annotated[list[dict[str, Any]], AfterValidator(_check_devices)] = Field(default_factory=list)
    observations: Observations | None = Field(
        default=None, description="What the node says about itself: serving strategy, split readiness, ..."
    )

    def stage_splits(self) -> str:
        ranges = sorted((s.layer_start, s.layer_end) for s in self.stages)
        return "|".join(f"{start}..{end}" for start, end in ranges)

    def certification(self) -> str:
        """The run's split certification: uncertified_override when any stage says so (the run then serves
        a package its roster does not certify), certified when the stages that say say certified, else
        what they say, or "" when none says anything."""
        said = sorted({s.certification for s in self.stages if s.certification})
        if UNCERTIFIED_OVERRIDE in said:
            return UNCERTIFIED_OVERRIDE
        return said[0] if said else ""


class RunsIn(StrictModel):
    runs: list[Any] = Field(min_length=1, max_length=64, description="1 to 64 runs.")


def validate_run(data: Any, prefix: str = "") -> RunIn:
    """Validate one run registration; on failure raise BodyError naming the first bad field."""
    if not isinstance(data, dict):
        raise BodyError("A run must be a JSON object.", prefix)
    check_json_tree(data, prefix)
    try:
        return RunIn.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, prefix) from None


def validate_runs(data: Any) -> list[Any]:
    return validate_list(data, RunsIn, "runs")
