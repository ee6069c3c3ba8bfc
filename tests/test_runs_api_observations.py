"""POST /api/v1/runs against a hostile node token: what a node says about itself is refused past its bounds,
naming the field, and the run's earlier registration is kept; and the answer never tells a node whether a
private (repo, sha) exists (issue 48), with the control that shows the old answer did."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from packages_app import telemetry
from packages_app.models import NodeRun, Package
from packages_app.nodes import identity
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

TEN_MB_ISH = "x" * (200 * 1024)  # the runs body is capped at 256 KiB: a 10 MB string is a 413 before this


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return value


def run(**observations: Any) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "package_ref": "meshllm/a-layers@main",
        "version": "0.78.0",
        "stages": [{"stage_id": "s0", "stage_index": 0, "layer_start": 0, "layer_end": 4}],
        "observations": observations,
    }


def post(client: Client, token: str, *runs: dict[str, Any]) -> Any:
    return client.post(
        "/api/v1/runs",
        json.dumps({"runs": list(runs)}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


HOSTILE = {
    "a huge list": (
        {"serving_strategy": {"strategy": "interactive", "applied": [{"axis": "a"}] * 5_000}},
        "serving_strategy",
    ),
    "deep nesting": ({"twin_policy": deep(12)}, "twin_policy"),
    "a wrong type": ({"serving_strategy": {"strategy": 7}}, "serving_strategy.strategy"),
    "a long string": ({"draft_name": TEN_MB_ISH}, "draft_name"),
    "an unknown group": ({"gate_tripped": True}, "gate_tripped"),
    "a wrong type in a list": ({"split_readiness": {"recommendations": [{"no": "text"}]}}, "split_readiness"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_observation_is_refused_naming_its_field_and_the_earlier_registration_is_kept(
    client: Client, case: str
) -> None:
    token = identity.create_node("n").token
    assert (
        post(client, token, run(serving_strategy={"strategy": "balanced"})).json()["results"][0]["status"]
        == 200
    )
    observations, field = HOSTILE[case]
    answer = post(client, token, run(**observations))
    assert answer.status_code in (200, 413)
    if answer.status_code == 200:
        (result,) = answer.json()["results"]
        assert result["status"] == 400 and result["field"].startswith(f"runs.0.observations.{field}"), result
    stored = NodeRun.objects.get(run_id="run-1")
    assert (
        stored.serving_strategy == "balanced"
        and stored.observations["serving_strategy"]["strategy"] == "balanced"
    )


def test_a_stage_admission_past_its_bounds_is_refused_naming_it(client: Client) -> None:
    token = identity.create_node("n").token
    body = run()
    body["stages"][0]["admission"] = {"package_id": "p" * 201}
    (result,) = post(client, token, body).json()["results"]
    assert result["status"] == 400 and result["field"] == "runs.0.stages.0.admission.package_id"


def private_revision() -> tuple[str, str]:
    package = f.make_package("meshllm/Secret-layers")
    Package.objects.filter(pk=package.pk).update(private=True)
    revision = f.make_revision(package, "consistent-mtp")
    return package.repo_id, revision.commit_sha


def probe(client: Client, token: str, repo: str, sha: str, run_id: str) -> dict[str, Any]:
    body = {"run_id": run_id, "package_ref": f"{repo}@{sha}", "package": {"repo": repo, "revision": sha}}
    (result,) = post(client, token, body).json()["results"]
    return {k: v for k, v in result.items() if k != "run_id"}


def test_a_node_cannot_tell_whether_a_private_repo_and_sha_exist(client: Client) -> None:
    repo, sha = private_revision()
    token = identity.create_node("prober").token
    real = probe(client, token, repo, sha, "probe-1")
    made_up = probe(client, token, repo, "f" * 40, "probe-2")
    assert real == made_up == {"index": 0, "status": 200, "revision_linked": False, "reports_linked": 0}
    assert NodeRun.objects.get(run_id="probe-1").revision_id is not None  # the link itself is stored


def test_the_control_the_old_answer_told_the_node_which_private_sha_exists(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "may_tell_linked", lambda revision_id: revision_id is not None)
    repo, sha = private_revision()
    token = identity.create_node("prober").token
    assert probe(client, token, repo, sha, "probe-1")["revision_linked"] is True
    assert probe(client, token, repo, "f" * 40, "probe-2")["revision_linked"] is False


def test_a_public_revision_is_still_said_to_be_linked(client: Client) -> None:
    revision = f.make_revision(f.make_package("meshllm/Open-layers"), "consistent-mtp")
    token = identity.create_node("n").token
    assert probe(client, token, "meshllm/Open-layers", revision.commit_sha, "r")["revision_linked"] is True
