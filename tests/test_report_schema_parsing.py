"""nodes/report_schema.py and nodes/run_schema.py (pure): what a node's report, baseline window and run
registration become before anything is stored, with no database.

Well-formed bodies are the ones nodes send (docs/node-report.md sections 1, 2, 5 and 6: timings of each
kind, a split topology, what the node says about itself, a baseline engine's window); each malformed shape
is refused with one sentence and the dotted path of what is wrong, and an implausible value is kept and
flagged, never refused.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from packages_app import report_metrics
from packages_app.devnode import payloads
from packages_app.nodes import report_schema as schema
from packages_app.nodes import run_schema
from packages_app.nodes.report_schema import BodyError

REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
SHA = "a" * 40
MTP_PLAN = payloads.RunPlan(repo=REPO)
NGRAM_PLAN = payloads.RunPlan(repo=REPO, requested_strategy="ngram-cache", effective_strategy="ngram-cache")


def node_timings(plan: payloads.RunPlan = MTP_PLAN, seed: int = 1) -> dict[str, Any]:
    return payloads.timings(plan, payloads.decode(plan, random.Random(seed), 128))


def report(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": REPO, "revision": SHA, "manifest_sha256": "b" * 64},
        "topology": {
            "topology_id": "topo-1",
            "stages": [
                {"node": "node-b", "layer_start": 27, "layer_end": 41, "device": "Metal", "stage_index": 1},
                {"node": "node-a", "layer_start": 0, "layer_end": 27, "device": "CUDA0", "stage_index": 0},
            ],
        },
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "native-mtp",
            "mtp_source": "Integrated",
        },
        "hardware": {"gpu": "RTX 4090", "vram_gb": 24},
        "timings": node_timings(),
    }
    return body | changes


def refused(call: Callable[..., object], *args: Any) -> BodyError:
    with pytest.raises(BodyError) as raised:
        call(*args)
    return raised.value


def refusal(data: Any, prefix: str = "") -> BodyError:
    with pytest.raises(BodyError) as refused:
        schema.validate_report_body(data, prefix)
    return refused.value


# --- Reports -----------------------------------------------------------------------------------


@pytest.mark.parametrize("plan", [MTP_PLAN, NGRAM_PLAN], ids=["native-mtp", "ngram-cache"])
def test_a_report_as_a_node_sends_it_is_valid_typed_and_digested_by_its_canonical_body(
    plan: payloads.RunPlan,
) -> None:
    body = report(timings=node_timings(plan))
    parsed, digest = schema.validate_report_body(body)
    assert parsed.package.repo == REPO and parsed.timings.predicted_n == body["timings"]["predicted_n"]
    assert parsed.topology is not None and parsed.topology.stage_splits() == "0..27|27..41"
    assert parsed.timings.implausible_keys() == []
    relaid = dict(reversed(list(body.items())))  # the same body in another key order
    assert schema.validate_report_body(relaid)[1] == digest
    assert schema.validate_report_body(report(hardware={"gpu": "other"}))[1] != digest


def test_unknown_timing_counters_are_kept_as_the_node_sent_them() -> None:
    extra = {
        "some_flag": True,
        "nothing": None,
        "a_rate": 0.25,
        "a_name": "x" * schema.MAX_TIMING_STRING,
        "verify_window_occupancy_ms_by_depth": [1.5, None, 3],
    }
    parsed, _ = schema.validate_report_body(report(timings=node_timings() | extra))
    assert {k: v for k, v in (parsed.timings.model_extra or {}).items() if k in extra} == extra


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({"nested": 1}, "an_object"),
        ("x" * (schema.MAX_TIMING_STRING + 1), "a_long_string"),
        ([1] * (schema.MAX_TIMING_ARRAY + 1), "a_long_list"),
        (["text"], "a_list_of_text"),
        ([True], "a_list_of_booleans"),
        (1, "k" * (schema.MAX_TIMING_KEY_CHARS + 1)),
    ],
)
def test_an_unknown_timing_counter_of_another_shape_is_refused_naming_its_key(value: Any, key: str) -> None:
    error = refusal(report(timings={key: value}))
    assert error.field == f"timings.{key}"
    assert "A timings value should be a number, a boolean, null" in error.message


def test_a_non_finite_counter_given_as_a_python_float_is_refused() -> None:
    for value, path in ((float("nan"), "timings.odd"), ([float("inf")], "timings.odd.0")):
        error = refusal(report(timings={"odd": value}))
        assert (error.field, error.message) == (path, "Numbers must be finite.")


def test_timings_past_the_hard_limits_are_refused_whole() -> None:
    many = {f"k{i}": 1 for i in range(schema.MAX_TIMING_KEYS + 1)}
    big = {f"k{i}": "x" * 200 for i in range(100)}
    for timings in (many, big):
        error = refusal(report(timings=timings))
        assert (error.field, error.message) == (
            "timings",
            "'timings': timings should be at most 16 KiB and 512 keys.",
        )
    assert refusal(report(timings=[1, 2])).field == "timings"  # not an object at all


def test_implausible_and_contradicting_counters_are_kept_and_flagged_not_refused() -> None:
    timings = node_timings(NGRAM_PLAN) | {"predicted_per_second": 5e6, "speculative_accepted_n": 10**6}
    parsed, _ = schema.validate_report_body(report(timings=timings))
    flagged = parsed.timings.implausible_keys()
    assert flagged == ["predicted_per_second", "speculative_accepted_n", "speculative_proposed_n"]
    assert parsed.timings.plausible("predicted_per_second") is None
    assert parsed.timings.plausible("speculative_proposed_n") is None  # one side of a contradiction
    assert parsed.timings.plausible("prompt_n") == timings["prompt_n"]
    assert parsed.timings.plausible("verify_window_depth") is None  # absent


def test_accepted_drafts_without_a_proposed_count_are_flagged_alone() -> None:
    parsed, _ = schema.validate_report_body(report(timings={"draft_n_accepted": 3}))
    assert parsed.timings.implausible_keys() == ["draft_n_accepted"]
    assert parsed.timings.plausible("draft_n_accepted") is None


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"package": {"repo": "a--b/c", "revision": SHA}}, "package.repo", "must not contain '--' or '..'"),
        ({"package": {"repo": "a/b.git", "revision": SHA}}, "package.repo", "nor end in '.git'"),
        ({"package": {"repo": REPO, "revision": "main"}}, "package.revision", "should match pattern"),
        ({"observed_at": 1733400000}, "observed_at", "RFC 3339 timestamp string"),
        ({"observed_at": "1990-01-01T00:00:00Z"}, "observed_at", "between 2000 and 2100"),
        ({"observed_at": "2026-01-01T00:00:00"}, "observed_at", "timezone"),
        (
            {"topology": {"stages": [{"node": "a", "layer_start": 5, "layer_end": 5}]}},
            "topology.stages.0",
            "layer_end should be greater than layer_start",
        ),
        ({"speculative": {"effective_strategy": "Native MTP"}}, "speculative.effective_strategy", "pattern"),
        ({"hardware": {"notes": "x" * 5000}}, "hardware", "hardware should be at most 4 KiB"),
        ({"hardware": {"a": [[[[[[[[[1]]]]]]]]]}}, "hardware", "hardware should nest at most 8 levels"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_field_and_what_is_wrong(
    changes: dict[str, Any], field: str, message: str
) -> None:
    error = refusal(report(**changes))
    assert error.field == field and message in error.message


def test_unknown_and_missing_keys_are_named_in_plain_words() -> None:
    assert refusal(report(colour="blue")).message == "Unknown key 'colour' is not allowed."
    body = report()
    del body["timings"]
    error = refusal(body, prefix="reports.3")
    assert (error.message, error.field) == ("Missing required key 'timings'.", "reports.3.timings")
    assert refusal([1, 2], prefix="reports.0").message == "A report must be a JSON object."


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a\x00b", "must not contain NUL characters or lone surrogates"),
        ("\ud800", "must not contain NUL characters or lone surrogates"),
        (float("inf"), "Numbers must be finite."),
    ],
)
def test_text_and_numbers_storage_cannot_hold_are_refused_naming_the_path(value: Any, message: str) -> None:
    error = refusal(report(hardware={"cards": [{"name": value}]}))
    assert error.field == "hardware.cards.0.name" and message in error.message


def test_a_key_storage_cannot_hold_is_refused_with_a_printable_path() -> None:
    error = refusal(report(hardware={"bad\x00key": 1}))
    assert error.field == "hardware.bad?key" and "NUL" in error.message


def test_text_that_only_looks_suspect_is_stored() -> None:
    parsed, digest = schema.validate_report_body(report(hardware={"note": "NaN Infinity \\u0000"}))
    assert parsed.hardware == {"note": "NaN Infinity \\u0000"} and len(digest) == 64


def test_a_body_nested_past_the_depth_cap_is_refused_by_the_tree_walk() -> None:
    deep: Any = "x"
    for _ in range(schema.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(BodyError, match=f"nests deeper than {schema.MAX_DEPTH} levels"):
        schema.check_json_tree({"hardware": deep})
    assert schema.nesting_depth(deep) == schema.MAX_DEPTH + 1  # counting stops past the cap


def test_a_batch_is_an_object_of_1_to_500_untyped_reports() -> None:
    assert schema.validate_batch({"reports": [1, {}]}) == [1, {}]  # each item is judged alone later
    with pytest.raises(BodyError, match=r'like \{"reports": \[\.\.\.\]\}'):
        schema.validate_batch([report()])
    error = refused(schema.validate_batch, {"reports": []})
    assert error.field == "reports" and "at least 1 item" in error.message
    too_many = {"reports": [{}] * (schema.MAX_BATCH + 1)}
    assert "at most 500 items" in refused(schema.validate_batch, too_many).message


def test_the_timings_model_follows_the_metrics_table() -> None:
    table = (
        report_metrics.ReportMetric("tokens_out", "int", "tokens", "Output tokens", bound=(0, 10)),
        report_metrics.ReportMetric("lag", "float", "ms", "Lag"),
    )
    fields = schema.timings_fields(table)
    assert list(fields) == ["tokens_out", "lag"]
    assert (
        fields["tokens_out"][1].description
        == "Output tokens. Outside 0..10 it is stored and flagged, not refused."
    )
    assert fields["lag"][1].description == "Lag, in ms."
    model = schema.build_timings(table)
    assert model.model_validate({"tokens_out": 3, "lag": 2}).model_dump()["lag"] == 2.0


# --- Baseline engines ----------------------------------------------------------------------------


def baseline(**figures: Any) -> dict[str, Any]:
    return {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "window_seconds": 60.0,
        "engine": "llama.cpp",
        "engine_version": "b5040",
        "source_model": "unsloth/Qwen3-8B-GGUF",
        "figures": figures,
    }


def test_a_baseline_window_as_the_agent_sends_it_is_valid_with_its_decode_rate() -> None:
    window = baseline(
        predicted_n=1200, predicted_seconds=30.0, drafts=100, draft_tokens=400, accepted_tokens=300
    )
    parsed, digest = schema.validate_baseline(window, "reports.0")
    assert parsed.decode_rate() == 40.0 and parsed.flagged() == [] and len(digest) == 64
    only_rate, _ = schema.validate_baseline(baseline(predicted_per_second=12.5), "")
    assert only_rate.decode_rate() == 12.5


def test_a_baseline_window_that_contradicts_itself_is_kept_and_flagged() -> None:
    parsed, _ = schema.validate_baseline(
        baseline(
            predicted_n=10**9,
            predicted_seconds=1.0,
            drafts=50,
            draft_tokens=40,
            accepted_tokens=41,
            accepted_per_position=[60, 5],
        ),
        "",
    )
    assert parsed.flagged() == ["accepted_tokens", "drafts", "accepted_per_position", "predicted_per_second"]
    alone, _ = schema.validate_baseline(baseline(accepted_tokens=1, accepted_per_position=[1]), "")
    assert alone.flagged() == ["accepted_tokens", "accepted_per_position"]  # nothing drafted beside them


def test_a_malformed_baseline_window_is_refused_naming_the_field() -> None:
    wrong_engine = baseline() | {"engine": "ollama"}
    error = refused(schema.validate_baseline, wrong_engine, "reports.2")
    assert error.field == "reports.2.engine" and "'llama.cpp' or 'vllm'" in error.message
    assert refused(schema.validate_baseline, "x", "reports.1").message == (
        "A baseline report must be a JSON object."
    )
    assert schema.validate_baselines({"reports": [{}]}) == [{}]
    too_many = {"reports": [{}] * (schema.MAX_BASELINE_BATCH + 1)}
    assert "at most 100 items" in refused(schema.validate_baselines, too_many).message


# --- Runs the agent registers (run_schema.py) -----------------------------------------------------


def run(**changes: Any) -> dict[str, Any]:
    plan = payloads.RunPlan(repo=REPO, serving_strategy="interactive", operator_strategy=False)
    stages = [
        {
            "stage_id": s.stage_id,
            "stage_index": i,
            "node_id": s.node_id,
            "layer_start": s.layer_start,
            "layer_end": s.layer_end,
            "device": s.device,
            "certification": s.certification or "",
            "raw": {"stage_id": s.stage_id, "state": "ready"},
            "admission": {"package_id": "pkg-1", "plan_id": "plan-1"},
        }
        for i, s in enumerate(plan.stages)
    ]
    body: dict[str, Any] = {
        "run_id": "run-1",
        "topology_id": "topo-1",
        "package_ref": f"{REPO}@main",
        "package": {"repo": REPO, "revision": SHA},
        "version": payloads.VERSION,
        "stages": list(reversed(stages)),
        "devices": [{"backend_device": "CUDA0"}],
        "observations": {
            "serving_strategy": payloads.serving_strategy_payload(plan),
            "split_readiness": payloads.split_readiness_payload(
                payloads.RunPlan(repo=REPO, excluded_peer="peer-old-1"), plan.package_ref
            ),
            "provenance": {"served_by_node_id": "devnode-a", "dispatch_path": "local"},
            "twin_policy": {"mode": "off"},
            "not_reported": ["draft_name"],
        },
    }
    return body | changes


def run_refusal(data: Any, prefix: str = "runs.0") -> BodyError:
    with pytest.raises(BodyError) as refused:
        run_schema.validate_run(data, prefix)
    return refused.value


def test_a_run_as_the_agent_registers_it_is_valid_with_what_the_node_says_about_itself() -> None:
    parsed = run_schema.validate_run(run())
    assert parsed.stage_splits() == "0..21|21..41" and parsed.certification() == "certified"
    observations = parsed.observations
    assert observations is not None and observations.serving_strategy is not None
    assert observations.serving_strategy.speculative() == "ngram-suffix"
    assert observations.split_readiness is not None and observations.split_readiness.blockers[0].count == 1
    assert parsed.stages[0].admission is not None and parsed.stages[0].admission.package_id == "pkg-1"


def test_a_serving_strategy_that_set_no_speculative_strategy_says_so() -> None:
    balanced = payloads.serving_strategy_payload(payloads.RunPlan(repo=REPO, serving_strategy="balanced"))
    parsed = run_schema.validate_run(run(observations={"serving_strategy": balanced}))
    assert parsed.observations is not None and parsed.observations.serving_strategy is not None
    assert parsed.observations.serving_strategy.speculative() == ""


def test_a_run_serving_an_uncertified_split_says_so_whatever_the_other_stages_say() -> None:
    body = run()
    body["stages"][0]["certification"] = run_schema.UNCERTIFIED_OVERRIDE
    assert run_schema.validate_run(body).certification() == "uncertified_override"
    for stage in body["stages"]:
        stage["certification"] = ""
    assert run_schema.validate_run(body).certification() == ""  # an older node says nothing


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"run_id": ""}, "runs.0.run_id", "at least 1 character"),
        ({"devices": [{}] * 65}, "runs.0.devices", "devices should be at most 64 entries and 4 KiB"),
        ({"devices": [{"a": [[[[[[[[1]]]]]]]]}]}, "runs.0.devices", "devices should be at most 64 entries"),
        ({"devices": [{"name": "x" * 5000}]}, "runs.0.devices", "4 KiB"),
        ({"observations": {"twin_policy": "x" * 9000}}, "runs.0.observations.twin_policy", "at most 8 KiB"),
        (
            {"observations": {"provenance": {"notes": "x" * 9000}}},
            "runs.0.observations.provenance",
            "it should be at most 8 KiB and 8 levels deep",
        ),
        ({"observations": {"weather": "fine"}}, "runs.0.observations.weather", ""),
    ],
)
def test_a_malformed_run_is_refused_naming_the_field(
    changes: dict[str, Any], field: str, message: str
) -> None:
    error = run_refusal(run(**changes))
    assert error.field == field and message in error.message


def test_a_stage_object_past_its_caps_is_refused_naming_it() -> None:
    for raw in ({"log": "x" * 5000}, {"a": [[[[[[[[1]]]]]]]]}):
        body = run()
        body["stages"][1]["raw"] = raw
        error = run_refusal(body)
        assert (
            error.field == "runs.0.stages.1.raw"
            and "raw should be at most 4 KiB and 8 levels deep" in error.message
        )


def test_a_run_that_is_not_an_object_or_holds_unstorable_text_is_refused() -> None:
    assert run_refusal(["run-1"]).message == "A run must be a JSON object."
    error = run_refusal(run(model_id="a\x00b"))
    assert error.field == "runs.0.model_id" and "NUL" in error.message


def test_runs_are_an_object_of_1_to_64_untyped_runs() -> None:
    assert run_schema.validate_runs({"runs": [run()]}) == [run()]
    assert len(run_schema.validate_runs({"runs": [{}, 1]})) == 2
    error = refused(run_schema.validate_runs, {"runs": [{}] * 65})
    assert error.field == "runs" and "at most 64 items" in error.message
    assert 'like {"runs": [...]}' in refused(run_schema.validate_runs, []).message
