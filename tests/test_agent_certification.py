"""Nodes say whether they were certified (issue 20 item 4): the agent keeps each stage's split-certification
status and weight quantization, and the raw stage object, and meshdash stores them on the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from packages_app.devhub.generator import GLM51_REPO
from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.models import NodeRun
from packages_app.nodes import agent_runs, identity
from tests.test_agent import Meshdash, make_agent, meshdash  # noqa: F401 (a fixture)

SHA = "d" * 40


def stage(**extra: Any) -> dict[str, Any]:
    base = {"stage_id": "s0", "stage_index": 0, "run_id": "r", "layer_start": 0, "layer_end": 21}
    return base | extra


@pytest.mark.parametrize(
    "key",
    [
        "split_certification",
        "certification",
        "certification_status",
        "split_certification_status",
        "split_certification_admission",
    ],
)
@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("certified", "certified"),
        ("uncertified_override", "uncertified_override"),
        ("UncertifiedOverride", "uncertified_override"),
        ("uncertified-override", "uncertified_override"),
        ({"status": "Certified"}, "certified"),
    ],
)
def test_the_agent_reads_the_certification_under_any_likely_key(key: str, value: Any, read: str) -> None:
    assert agent_runs.certification_of(stage(**{key: value})) == read


def test_an_unknown_certification_value_is_kept_as_the_node_wrote_it() -> None:
    assert agent_runs.certification_of(stage(split_certification="pending_roster")) == "pending_roster"
    assert agent_runs.certification_of(stage()) == ""


def test_the_agent_keeps_the_raw_stage_object_so_nothing_is_lost() -> None:
    raw = stage(split_certification="certified", future_field={"nested": [1, 2]}, weight_quantization="q8")

    kept = agent_runs._stage(raw)

    assert kept is not None
    assert kept["raw"] == raw
    assert (kept["certification"], kept["weight_quantization"]) == ("certified", "q8")


def test_a_stage_object_over_4_kib_keeps_its_small_fields_and_names_what_it_dropped() -> None:
    raw = stage(split_certification="uncertified_override", error="x" * 10_000)

    kept = agent_runs.raw_stage(raw)

    assert len(json.dumps(kept)) <= agent_runs.MAX_RAW_STAGE_BYTES
    assert kept["_trimmed"] == ["error"]
    assert kept["split_certification"] == "uncertified_override"


def _uncertified_plan() -> payloads.RunPlan:
    return payloads.RunPlan(
        repo=GLM51_REPO,
        ref=SHA,
        run_id="run-glm",
        stages=(
            payloads.StagePlan("stage-0", "devnode-a", 0, 40, "CUDA0", "uncertified_override"),
            payloads.StagePlan("stage-1", "devnode-b", 40, 79, "Metal", "uncertified_override"),
        ),
    )


def test_a_node_serving_with_the_override_is_registered_as_uncertified_override(
    meshdash: Meshdash,  # noqa: F811
    tmp_path: Path,
) -> None:
    with DevNode(_uncertified_plan()) as node:
        assert make_agent(node, meshdash, tmp_path).cycle() is True
        listed = payloads.stages_payload(node.plan)["stages"]

    run = NodeRun.objects.get()
    assert run.certification == "uncertified_override"
    assert [s["certification"] for s in run.stages] == ["uncertified_override"] * 2
    assert [s["weight_quantization"] for s in run.stages] == ["auto"] * 2
    assert [s["raw"] for s in run.stages] == listed
    assert NodeRun.objects.filter(certification="uncertified_override").count() == 1


def test_a_certified_node_is_registered_as_certified(meshdash: Meshdash, tmp_path: Path) -> None:  # noqa: F811
    plan = payloads.RunPlan(repo="meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers", ref=SHA, run_id="run-q")
    with DevNode(plan) as node:
        assert make_agent(node, meshdash, tmp_path).cycle() is True

    assert NodeRun.objects.get().certification == "certified"


# --- POST /api/v1/runs ----------------------------------------------------------------------------


def post_runs(client: Client, token: str, *stages: dict[str, Any]) -> Any:
    body = {"runs": [{"run_id": "run-1", "stages": list(stages)}]}
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return client.post("/api/v1/runs", json.dumps(body), content_type="application/json", **auth)


def _stage_in(**extra: Any) -> dict[str, Any]:
    return {"stage_id": "s0", "stage_index": 0, "layer_start": 0, "layer_end": 21} | extra


@pytest.mark.django_db
def test_one_overridden_stage_flags_the_run(client: Client) -> None:
    token = identity.create_node("gpu-1").token
    stages = (
        _stage_in(certification="certified"),
        _stage_in(stage_id="s1", stage_index=1, certification="uncertified_override"),
    )

    result = post_runs(client, token, *stages).json()["results"][0]

    assert result["status"] == 200
    assert NodeRun.objects.get().certification == "uncertified_override"


@pytest.mark.django_db
def test_a_run_from_an_agent_that_sends_no_certification_is_still_registered(client: Client) -> None:
    token = identity.create_node("gpu-1").token

    assert post_runs(client, token, _stage_in()).json()["results"][0]["status"] == 200
    assert NodeRun.objects.get().certification == ""


@pytest.mark.django_db
def test_a_raw_stage_over_4_kib_is_refused_and_one_under_it_is_kept(client: Client) -> None:
    token = identity.create_node("gpu-1").token

    refused = post_runs(client, token, _stage_in(raw={"error": "x" * 5000})).json()["results"][0]
    kept = post_runs(client, token, _stage_in(raw={"error": "x" * 3000})).json()["results"][0]

    assert refused["status"] == 400 and refused["field"].endswith("raw")
    assert kept["status"] == 200
    assert NodeRun.objects.get().stages[0]["raw"] == {"error": "x" * 3000}
