"""devnode says what a mesh-llm node says: the fields docs/node-report.md lists, with their types."""

from __future__ import annotations

import json
import random
import urllib.request
from typing import Any

from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode

# docs/node-report.md section 2, StageStatus, in the document's order.
STAGE_STATUS_FIELDS = [
    "topology_id",
    "run_id",
    "model_id",
    "backend",
    "package_ref",
    "manifest_sha256",
    "source_model_path",
    "source_model_sha256",
    "source_model_bytes",
    "materialized_path",
    "materialized_bytes",
    "materialized_pinned",
    "projector_path",
    "multimodal",
    "stage_id",
    "stage_index",
    "node_id",
    "layer_start",
    "layer_end",
    "state",
    "bind_addr",
    "activation_width",
    "wire_dtype",
    "selected_device",
    "ctx_size",
    "lane_count",
    # Newer StageStatusSnapshot (Mesh-LLM/mesh-llm@e1d0dbd7 stage/status.rs) has it before error.
    "weight_quantization",
    "error",
    "shutdown_generation",
    # The split-certification status (docs/rules.md 6a; the JSON key is not pinned down, devnode uses the
    # log's).
    "split_certification",
]
ALWAYS_TIMINGS = [
    "prompt_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
    "native_mtp_rejected",
    "native_mtp_proposal_compute_us",
    "native_mtp_verification_compute_us",
    "native_mtp_verifications",
]
STANDALONE_SPECULATIVE = [
    "speculative_windows",
    "speculative_proposed_n",
    "speculative_accepted_n",
    "speculative_rejected_n",
    "speculative_accept_rate",
    "verify_window_verify_elapsed_ms",
    "verify_window_stage0_compute_ms",
    "verify_window_forward_write_ms",
    "verify_window_downstream_wait_ms",
]
PLAN = payloads.RunPlan(repo="meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers", manifest_sha256="f" * 64)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_runtime_stages_lists_every_stage_status_field_and_the_topology() -> None:
    with DevNode(PLAN) as node:
        body = get(node.url + "/api/runtime/stages")
    assert body["stages"] == body["statuses"]
    assert [list(stage) for stage in body["stages"]] == [STAGE_STATUS_FIELDS] * 2
    assert set(body["stages"][0]["selected_device"]) == {"backend_device", "stable_id", "index", "vram_bytes"}
    topology = body["topologies"][0]
    assert {k: topology[k] for k in ("run_id", "package_ref")} == {
        "run_id": "run-0001",
        "package_ref": PLAN.package_ref,
    }
    assert [s["layer_start"] for s in topology["stages"]] == [0, 21]


def test_status_leads_with_the_version_and_the_node_id() -> None:
    with DevNode(PLAN) as node:
        body = get(node.url + "/api/status")
    assert list(body)[:3] == ["version", "latest_version", "node_id"]
    assert body["version"] == payloads.VERSION


def test_timings_hold_the_base_keys_in_btreemap_order_and_the_speculative_group_when_it_ran() -> None:
    rng = random.Random(1)
    mtp = payloads.timings(PLAN, payloads.decode(PLAN, rng, 64))
    ngram_plan = payloads.RunPlan(repo=PLAN.repo, effective_strategy="ngram-cache")
    ngram = payloads.timings(ngram_plan, payloads.decode(ngram_plan, rng, 64))
    assert sorted(mtp) == list(mtp) == sorted(ALWAYS_TIMINGS)
    assert sorted(ngram) == list(ngram) == sorted(ALWAYS_TIMINGS + STANDALONE_SPECULATIVE)
    assert ngram["draft_n"] == ngram["speculative_proposed_n"]


def test_the_decode_span_carries_the_strategies_and_the_run_id() -> None:
    rng = random.Random(2)
    measured = payloads.decode(PLAN, rng, 64)
    span = payloads.decode_span(
        payloads.span_attributes(PLAN, measured, "stage-0"), rng, measured.predicted_ms
    )
    attributes = {kv.key: kv.value for kv in span.attributes}
    assert span.name == "stage.openai_decode" and span.kind == span.SpanKind.SPAN_KIND_INTERNAL
    assert attributes["llama_stage.spec.effective_strategy"].string_value == "native-mtp"
    assert attributes["skippy.run_id"].string_value == "run-0001"
    assert attributes["llama_stage.native_mtp.drafted"].int_value == measured.drafted
