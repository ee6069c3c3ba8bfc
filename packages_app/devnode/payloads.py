"""Pure: what a mesh-llm node says about one run - console API bodies, response timings, decode spans.

Shapes from docs/node-report.md: ``GET /api/runtime/stages`` (section 2), ``GET /api/status`` (section 3),
``timings`` (section 1, keys in alphabetical order as serde's BTreeMap writes them) and the
``stage.openai_decode`` span's attributes (section 4); since the autumn (section 5) the serving strategy
in ``/api/status`` ``runtime.serving_strategy``, each stage's ``admission``, ``GET
/api/diagnostics/split-readiness`` and the ``openai.exchange.v1`` terminal event with its serving
provenance. A plan's ``reports`` says which of those its version emits (an older node emits none). Nothing
is emitted that mesh-llm does not: no field says whether the break-even gate tripped (mesh-llm reports
none), and ``twin_policy``, whose shape is not pinned down, is not emitted.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

# A release the release matrix knows (packages_app/audit/releases.toml): meshdash judges a node against
# its own release, so the demo's nodes run real ones.
VERSION = "0.78.0"
# What a node says about itself since the autumn (docs/node-report.md section 5), by the name a plan's
# ``reports`` uses: a node of an older version reports none of them.
NEW_FIELDS = ("serving_strategy", "admission", "split_readiness", "exchange")
SERVING_STRATEGIES = ("balanced", "interactive", "throughput")


@dataclass(frozen=True)
class StagePlan:
    stage_id: str
    node_id: str
    layer_start: int
    layer_end: int
    device: str = "CUDA0"
    # "certified", or "uncertified_override" for a split served with --allow-uncertified-split
    # (docs/rules.md 6a); None: the stage says nothing, as nodes before the gate do.
    certification: str | None = "certified"
    weight_quantization: str = "auto"  # StageWeightQuantization::Auto, the stage loader's default


@dataclass(frozen=True)
class RunPlan:
    """One run of a package split over stages, and how fast and with which plan it decodes."""

    repo: str
    ref: str = "main"
    manifest_sha256: str | None = None
    run_id: str = "run-0001"
    topology_id: str = "topo-0001"
    model_id: str = "Qwen3.5-35B-A3B"
    node_id: str = "devnode-a"
    stages: tuple[StagePlan, ...] = field(
        default_factory=lambda: (
            StagePlan("stage-0", "devnode-a", 0, 21, "CUDA0"),
            StagePlan("stage-1", "devnode-b", 21, 41, "Metal"),
        )
    )
    requested_strategy: str = "auto"
    effective_strategy: str = "native-mtp"
    decode_tps: float = 42.0
    version: str = VERSION  # mesh-llm's version, as /api/status reports it
    error: str | None = None  # a stage that failed to load: state "failed" with mesh-llm's error
    serving_strategy: str | None = None  # --strategy balanced | interactive | throughput (#2112)
    operator_strategy: bool = True  # the operator set speculative.strategy (a serving strategy keeps it)
    draft_name: str | None = None  # /api/status draft_name: a draft model beside the package
    package_id: str | None = None  # each stage's admission.package_id (the v2 manifest's package_id)
    model_revision: str | None = None  # the exchanges' model_revision (None: the ref's 40-hex sha, if any)
    weights_digest: str | None = None  # the exchanges' weights_digest
    excluded_peer: str | None = None  # a peer split readiness excludes for an old stage protocol
    reports: tuple[str, ...] = NEW_FIELDS  # which section-5 fields its version emits

    @property
    def package_ref(self) -> str:
        return f"{self.repo}@{self.ref}"


def composed(plan: RunPlan) -> RunPlan:
    """The plan as its serving strategy composes it (serving_strategy.rs): ``interactive`` sets
    speculative.strategy ngram-suffix and ``throughput`` disabled where the operator left it unset, and
    the strategy then runs: the decode spans request and run it."""
    value = _strategy_speculative(plan)
    if not value:
        return plan
    return replace(plan, requested_strategy=value, effective_strategy=value)


def _strategy_speculative(plan: RunPlan) -> str:
    if plan.operator_strategy:
        return ""
    return {"interactive": "ngram-suffix", "throughput": "disabled"}.get(plan.serving_strategy or "", "")


def serving_strategy_payload(plan: RunPlan) -> dict[str, Any] | None:
    """``runtime.serving_strategy``: the StrategyPlan serving_strategy.rs reports, with its own words."""
    strategy = plan.serving_strategy
    if strategy is None:
        return None
    applied: list[dict[str, str]] = []
    declined: list[dict[str, str]] = []
    if strategy == "balanced":
        applied.append(_decision("all", "unchanged", "balanced is today's defaults; nothing is composed"))
        return {"strategy": strategy, "applied": applied, "declined": declined}
    if strategy == "interactive":
        because = (
            "input-grounded output is mostly a copy of the context, "
            "which the suffix matcher drafts in long spans"
        )
        _speculative(plan, "ngram-suffix", because, applied, declined)
        applied.append(
            _decision(
                "speculative.verify_window_runahead_tokens",
                "96",
                "run-ahead admission beat every fixed depth in #1409, clean and jittered",
            )
        )
        applied.append(
            _decision(
                "throughput.last_stage_decode_batch",
                "false",
                (
                    "the batched final stage produces no native MTP drafts, "
                    "so it cannot coexist with speculation"
                ),
            )
        )
    else:
        applied.append(
            _decision(
                "throughput.last_stage_decode_batch",
                "true",
                "moving layers onto the last stage only helps once it batches decode across lanes (#1935)",
            )
        )
        applied.append(
            _decision(
                "throughput.pipeline_decode_groups",
                "2",
                (
                    "keeps more than one batch in flight across the pipeline; "
                    "4 lanes / 2 groups is the measured arm"
                ),
            )
        )
        because = "cannot coexist with the batched final stage this strategy needs"
        _speculative(plan, "disabled", because, applied, declined)
    return {"strategy": strategy, "applied": applied, "declined": declined}


def _speculative(
    plan: RunPlan, value: str, because: str, applied: list[dict[str, str]], declined: list[dict[str, str]]
) -> None:
    if plan.operator_strategy:
        declined.append(_decision("speculative.strategy", "kept your value", "already set"))
    else:
        applied.append(_decision("speculative.strategy", value, because))


def _decision(axis: str, value: str, because: str) -> dict[str, str]:
    return {"axis": axis, "value": value, "because": because}


def split_readiness_payload(plan: RunPlan, model_ref: str) -> dict[str, Any]:
    """``SplitReadinessReport`` (split_readiness.rs) for a split whose stage nodes all take part, and the
    excluded peer with mesh-llm's reason and recommendation when the plan names one."""
    participants = [
        {
            "node_id": node,
            "short_node_id": node[:8],
            "source": "local" if node == plan.node_id else "peer",
            "role": "host" if node == plan.node_id else "worker",
            "vram_bytes": 25_769_803_776,
            "artifact_transfer_supported": True,
            "model_source_state": "serving",
        }
        for node in dict.fromkeys(s.node_id for s in plan.stages)
    ]
    exclusions, blockers, recommendations = [], [], []
    if plan.excluded_peer:
        why = "Upgrade this peer; its stage protocol generation is too old for split serving."
        exclusions.append(
            {
                "node_id": plan.excluded_peer,
                "short_node_id": plan.excluded_peer[:8],
                "source": "peer",
                "role": "worker",
                "reason": "stage_protocol_generation",
                "recommendation": why,
                "vram_bytes": 8_589_934_592,
            }
        )
        blockers.append(
            {
                "reason": "stage_protocol_generation",
                "count": 1,
                "short_node_ids": [plan.excluded_peer[:8]],
                "recommendation": why,
            }
        )
        recommendations.append("Upgrade excluded peers so they advertise current stage protocol support.")
    ready = len(participants) >= 2
    if not ready:
        recommendations.insert(
            0,
            f"Start at least one more worker/host with --model {model_ref} --split and join it to this mesh.",
        )
    report: dict[str, Any] = {
        "model_ref": model_ref,
        "verdict": "ready" if ready else "waiting_for_peers",
        "participant_count": len(participants),
        "exclusion_count": len(exclusions),
        "active_topology_count": 1,
        "active_stage_count": len(plan.stages),
        "participants": participants,
        "exclusions": exclusions,
        "blockers": blockers,
        "recommendations": recommendations,
    }
    strategy = serving_strategy_payload(plan)
    return report | ({"serving_strategy": strategy} if strategy else {})


def exchange_event(plan: RunPlan, d: Decode, exchange_id: str) -> dict[str, Any]:
    """The ``openai.exchange.v1`` terminal envelope of one served completion (openai_exchange.rs), with
    its ServingProvenance, usage and digests (docs/node-report.md section 5), as a plugin logs it."""
    provenance: dict[str, Any] = {
        "served_by_node_id": plan.node_id,
        "hostname": plan.node_id,
        "gpu": plan.stages[0].device,
        "vram_bytes": 25_769_803_776,
        "is_soc": False,
        "quantization": "Q4_K_XL",
        "layer_count": max(s.layer_end for s in plan.stages),
        "model_canonical_ref": plan.package_ref,
    }
    revision = plan.model_revision or (plan.ref if len(plan.ref) == 40 else None)
    if revision:
        provenance["model_revision"] = revision
    if plan.weights_digest:
        provenance["weights_digest"] = plan.weights_digest
    return {
        "exchange_id": exchange_id,
        "dispatch_path": "typed_frontend",
        "phase": "terminal",
        "model": plan.model_id,
        "status": 200,
        "serving_provenance": provenance,
        "usage": {
            "prompt_tokens": d.prompt_n,
            "cached_prompt_tokens": 0,
            "completion_tokens": d.predicted_n,
            "total_tokens": d.prompt_n + d.predicted_n,
        },
    }


def stages_payload(plan: RunPlan) -> dict[str, Any]:
    """``GET /api/runtime/stages``: ``stages`` and ``statuses`` are the same array."""
    statuses = [_stage_status(plan, index, stage) for index, stage in enumerate(plan.stages)]
    topology = {
        "topology_id": plan.topology_id,
        "run_id": plan.run_id,
        "model_id": plan.model_id,
        "package_ref": plan.package_ref,
        "manifest_sha256": plan.manifest_sha256 or "",
        "stages": [
            {
                "stage_id": s.stage_id,
                "stage_index": i,
                "node_id": s.node_id,
                "layer_start": s.layer_start,
                "layer_end": s.layer_end,
                "endpoint": {"bind_addr": f"127.0.0.1:{7100 + i}"},
            }
            for i, s in enumerate(plan.stages)
        ],
    }
    return {"stages": statuses, "topologies": [topology], "statuses": statuses}


def _stage_status(plan: RunPlan, index: int, stage: StagePlan) -> dict[str, Any]:
    return (
        {
            "topology_id": plan.topology_id,
            "run_id": plan.run_id,
            "model_id": plan.model_id,
            "backend": "skippy",
            "package_ref": plan.package_ref,
            "manifest_sha256": plan.manifest_sha256,
            "source_model_path": None,
            "source_model_sha256": None,
            "source_model_bytes": None,
            "materialized_path": f"/var/cache/mesh-llm/{plan.run_id}/{stage.stage_id}",
            "materialized_bytes": 9_663_676_416,
            "materialized_pinned": False,
            "projector_path": None,
            "multimodal": False,
            "stage_id": stage.stage_id,
            "stage_index": index,
            "node_id": stage.node_id,
            "layer_start": stage.layer_start,
            "layer_end": stage.layer_end,
            "state": "failed" if plan.error else "ready",
            "bind_addr": f"127.0.0.1:{7100 + index}",
            "activation_width": 2048,
            "wire_dtype": "f16",
            "selected_device": {
                "backend_device": stage.device,
                "stable_id": None,
                "index": 0,
                "vram_bytes": 25_769_803_776,
            },
            "ctx_size": 8192,
            "lane_count": 4,
            "weight_quantization": stage.weight_quantization,
            "error": plan.error,
            "shutdown_generation": 0,
        }
        | _certification(stage)
        | _admission(plan)
    )


def _admission(plan: RunPlan) -> dict[str, Any]:
    if "admission" not in plan.reports or plan.package_id is None:
        return {}
    return {"admission": {"package_id": plan.package_id, "plan_id": f"plan-{plan.run_id}"}}


def _certification(stage: StagePlan) -> dict[str, Any]:
    # Which key /api/runtime/stages uses is not pinned down (docs/rules.md 6a); mesh-llm logs the status as
    # the field `split_certification`, so devnode writes that one.
    return {} if stage.certification is None else {"split_certification": stage.certification}


def status_payload(plan: RunPlan) -> dict[str, Any]:
    """``GET /api/status``: the fields the agent reads, in mesh-llm's order, and a few neighbours."""
    runtime: dict[str, Any] = {"backend": "skippy", "models": [plan.model_id]}
    strategy = serving_strategy_payload(plan) if "serving_strategy" in plan.reports else None
    if strategy is not None:
        runtime["serving_strategy"] = strategy
    return {
        "version": plan.version,
        "latest_version": None,
        "node_id": plan.node_id,
        "node_state": "serving",
        "node_status": "Serving",
        "is_host": True,
        "is_client": False,
        "llama_ready": True,
        "runtime": runtime,
        "model_name": plan.model_id,
        "models": [plan.model_id],
        "serving_models": [plan.model_id],
        "hosted_models": [plan.model_id],
        "draft_name": plan.draft_name,
        "api_port": 9337,
        "my_vram_gb": 24.0,
        "model_size_gb": 19.7,
        "peers": [],
        "inflight_requests": 0,
        "mesh_discovery_mode": "private",
        "discovery_scope": "local",
        "discovery_source": "config",
        "nostr_discovery": False,
        "publication_state": "private",
        "my_hostname": plan.node_id,
        "my_is_soc": False,
        "gpus": [
            {"name": s.device, "vram_bytes": 25_769_803_776} for s in plan.stages if s.node_id == plan.node_id
        ],
    }


@dataclass(frozen=True)
class Decode:
    """One completion's measurements, from which both the timings and the span are written."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    drafted: int
    accepted: int
    verifications: int


def decode(plan: RunPlan, rng: random.Random, max_tokens: int) -> Decode:
    predicted_n = max(1, min(max_tokens, rng.randint(32, 256)))
    tps = max(0.5, rng.gauss(plan.decode_tps, plan.decode_tps * 0.08))
    mtp = plan.effective_strategy.startswith("native-mtp") or plan.effective_strategy.startswith("ngram")
    drafted = int(predicted_n * 0.6) if mtp else 0
    accepted = int(drafted * rng.uniform(0.55, 0.85))
    return Decode(
        prompt_n=rng.randint(16, 600),
        prompt_ms=round(rng.uniform(15, 300), 3),
        predicted_n=predicted_n,
        predicted_ms=round(predicted_n * 1000.0 / tps, 3),
        drafted=drafted,
        accepted=accepted,
        verifications=drafted,
    )


def timings(plan: RunPlan, d: Decode) -> dict[str, Any]:
    """The ``timings`` object (docs/node-report.md 1.1, 1.4), sorted as a BTreeMap serializes it."""
    ngram = plan.effective_strategy.startswith("ngram")
    out: dict[str, Any] = {
        "prompt_n": d.prompt_n,
        "prompt_ms": d.prompt_ms,
        "prompt_per_second": d.prompt_n * 1000.0 / d.prompt_ms,
        "predicted_n": d.predicted_n,
        "predicted_ms": d.predicted_ms,
        "predicted_per_second": d.predicted_n * 1000.0 / d.predicted_ms,
        "draft_n": d.drafted,
        "draft_n_accepted": d.accepted,
        "native_mtp_rejected": 0 if ngram else d.drafted - d.accepted,
        "native_mtp_proposal_compute_us": 0 if ngram else d.drafted * 14,
        "native_mtp_verification_compute_us": 0 if ngram else d.verifications * 31,
        "native_mtp_verifications": 0 if ngram else d.verifications,
    }
    if ngram:
        windows = max(1, d.drafted // 4)
        out.update(
            speculative_windows=windows,
            speculative_proposed_n=d.drafted,
            speculative_accepted_n=d.accepted,
            speculative_rejected_n=d.drafted - d.accepted,
            speculative_accept_rate=d.accepted / d.drafted if d.drafted else 0.0,
            verify_window_downstream_wait_ms=0.0,
            verify_window_forward_write_ms=0.0,
            verify_window_stage0_compute_ms=0.0,
            verify_window_verify_elapsed_ms=0.0,
        )
    return dict(sorted(out.items()))


def span_attributes(plan: RunPlan, d: Decode, stage_id: str) -> dict[str, Any]:
    """The ``stage.openai_decode`` attributes mesh-llm sets (docs/node-report.md section 4)."""
    attrs: dict[str, Any] = {
        "skippy.run_id": plan.run_id,
        "skippy.stage_id": stage_id,
        "skippy.otel_dropped_events": 0,
        "skippy.otel_export_errors": 0,
        "llama_stage.spec.requested_strategy": plan.requested_strategy,
        "llama_stage.spec.effective_strategy": plan.effective_strategy,
        "llama_stage.elapsed_ms": d.predicted_ms,
        "llama_stage.decode_token_count": d.predicted_n,
    }
    if plan.effective_strategy.startswith("ngram"):
        attrs.update(
            {
                "llama_stage.spec.enabled": True,
                "llama_stage.spec.windows": max(1, d.drafted // 4),
                "llama_stage.spec.proposed": d.drafted,
                "llama_stage.spec.accepted": d.accepted,
                "llama_stage.spec.rejected": d.drafted - d.accepted,
                "llama_stage.spec.accept_rate": d.accepted / d.drafted if d.drafted else 0.0,
            }
        )
    else:
        attrs["llama_stage.spec.enabled"] = False
        attrs["llama_stage.native_mtp.enabled"] = d.drafted > 0
        if d.drafted:
            attrs.update(
                {
                    "llama_stage.native_mtp.drafted": d.drafted,
                    "llama_stage.native_mtp.accepted": d.accepted,
                    "llama_stage.native_mtp.rejected": d.drafted - d.accepted,
                    "llama_stage.native_mtp.verifications": d.verifications,
                }
            )
    return attrs


def decode_span(attributes: dict[str, Any], rng: random.Random, elapsed_ms: float) -> Span:
    """An OTLP Span as skippy's ``event_to_span`` builds it: SpanKind internal, no parent."""
    end = time.time_ns()
    span = Span(
        trace_id=rng.randbytes(16),
        span_id=rng.randbytes(8),
        name="stage.openai_decode",
        kind=Span.SpanKind.SPAN_KIND_INTERNAL,
        start_time_unix_nano=end - int(elapsed_ms * 1e6),
        end_time_unix_nano=end,
    )
    span.attributes.extend(KeyValue(key=key, value=any_value(value)) for key, value in attributes.items())
    return span


def any_value(value: Any) -> AnyValue:
    """JSON -> AnyValue as skippy maps it (telemetry.rs: string, bool, int, other number as double)."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def export_request(spans: list[Span], service: str = "mesh-llm") -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource = ResourceSpans()
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    resource.scope_spans.append(ScopeSpans(spans=spans))
    request.resource_spans.append(resource)
    return request


def length_delimited(number: int, payload: bytes) -> bytes:
    """One protobuf field of wire type 2 (a message, string or bytes) by hand: how the hostile exports of
    the tests and benchmarks are written on the wire without protobuf building them first."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
