"""Why MTP is off, from what the node itself says (issue 47): each observed cause, from payloads shaped as
docs/node-report.md section 5 gives them (devnode's console API read by meshdash-agent and posted to
/api/v1/runs, as a real node's agent does), asserted on the node page, /nodes/, the package page and the
JSON API; and the same node without the field, where the prediction stays and says it is one."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.models import NodeRun, Revision
from packages_app.nodes import agent_config, agent_runs, identity
from tests import dashboard_factories as f
from tests.test_fleet_registered import post_spans

pytestmark = pytest.mark.django_db

GLM = "meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers"
SERVING = (
    'MTP off by --strategy interactive: it set speculative.strategy = "ngram-suffix" where the operator '
    "left it unset, so this revision runs without MTP — set speculative.strategy explicitly"
)
PACKAGE_ID = "sha256:" + "2" * 64


def glm(verdict: str = "consistent-mtp", **fields: Any) -> Revision:
    """A package-v2 revision (v0.78.0 admits it): with ``consistent-mtp``, auto runs native MTP."""
    manifest = {"schema_version": 2, "package_id": PACKAGE_ID}
    values = {"schema_version": 2, "manifest_json": manifest, **fields}
    return f.make_revision(f.make_package(GLM), verdict, **values)


def plan(revision: Revision, **fields: Any) -> payloads.RunPlan:
    values: dict[str, Any] = {
        "repo": revision.package.repo_id,
        "ref": revision.commit_sha,
        "run_id": "run-glm",
        "topology_id": "topo-run-glm",
        "model_id": "GLM-4.7-Flash",
        "node_id": "demo-glm",
        "stages": (
            payloads.StagePlan("stage-0", "demo-glm", 0, 24, "CUDA0"),
            payloads.StagePlan("stage-1", "demo-glm-peer", 24, 48, "Metal"),
        ),
        "version": "0.78.0",
    }
    return payloads.RunPlan(**(values | fields))


def register(client: Client, node_plan: payloads.RunPlan, token: str, exchange_log: str = "") -> DevNode:
    """What meshdash-agent reads from the node's console API (and exchange log), posted as it posts it;
    the node served one completion first, so its exchange log has an event."""
    with DevNode(node_plan, exchange_log=exchange_log or None) as node:
        node.complete({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
        config = agent_config.Config(
            node_url=node.url, token=token, hub_url="http://127.0.0.1:9", exchange_log=exchange_log
        )
        runs = agent_runs.read_runs(config, agent_runs.RefResolver(config.hub_url))
    answer = client.post(
        "/api/v1/runs",
        json.dumps({"runs": runs}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200 and answer.json()["results"][0]["status"] == 200, answer.json()
    return node


def post_timings(client: Client, node: DevNode, token: str, n: int = 3) -> None:
    """Reports as the agent's proxy sends them: the completion's timings alone (no strategy named)."""
    rng = random.Random(3)
    bodies = []
    for _ in range(n):
        measured = payloads.decode(node.plan, rng, 128)
        bodies.append(
            {
                "report_id": str(uuid.uuid4()),
                "observed_at": datetime.now(UTC).isoformat(),
                "package": {"repo": node.plan.repo, "revision": node.plan.ref},
                "topology": {
                    "topology_id": node.plan.topology_id,
                    "stages": [
                        {"node": s.node_id, "layer_start": s.layer_start, "layer_end": s.layer_end}
                        for s in node.plan.stages
                    ],
                },
                "timings": payloads.timings(node.plan, measured),
            }
        )
    answer = client.post(
        "/api/v1/reports/batch",
        json.dumps({"reports": bodies}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200 and all(r["status"] == 201 for r in answer.json()["results"])


def surfaces(client: Client, revision: Revision, node: str = "demo-glm") -> dict[str, str]:
    """The advice text on each surface: the node page, /nodes/, the package page and the two APIs."""
    owner, name = revision.package.repo_id.split("/")
    node_api = client.get(f"/api/v1/nodes/{node}").json()
    (served,) = [s for s in node_api["serving"] if s["commit_sha"] == revision.commit_sha]
    package_api = client.get(f"/api/v1/packages/{owner}/{name}?revision={revision.commit_sha}").json()
    plans = [p for p in package_api["throughput"]["plans"] if p["node"] == node]
    return {
        "node page": client.get(f"/nodes/{node}/").content.decode(),
        "nodes": client.get("/nodes/").content.decode(),
        "package page": client.get(
            f"/packages/{owner}/{name}/?revision={revision.commit_sha}"
        ).content.decode(),
        "node api": served["advice"]["text"],
        "package api": " ".join(p["advice"]["text"] for p in plans),
    }


def assert_everywhere(found: dict[str, str], text: str) -> None:
    """``text`` in both APIs as it is, and on every page as the template escapes it."""
    for surface, body in found.items():
        wanted = text if surface.endswith("api") else html(text)
        assert wanted in body, (surface, text)


def html(text: str) -> str:
    return text.replace('"', "&quot;").replace("'", "&#x27;")


def test_a_node_whose_serving_strategy_turned_mtp_off_is_told_so_on_every_surface(client: Client) -> None:
    """The demo's GLM-4.7 node: --strategy interactive set ngram-suffix; its proxy's reports name none."""
    revision = glm()
    token = identity.create_node("demo-glm").token
    node = register(client, plan(revision, serving_strategy="interactive", operator_strategy=False), token)
    assert node.plan.effective_strategy == "ngram-suffix"  # the composed plan is what it runs
    post_timings(client, node, token)
    run = NodeRun.objects.get(run_id="run-glm")
    assert (run.serving_strategy, run.strategy_speculative) == ("interactive", "ngram-suffix")
    found = surfaces(client, revision)
    assert_everywhere(found, SERVING)
    for body in found.values():
        assert (
            "check the node&#x27;s speculative.strategy" not in body
            and "check the node's speculative" not in body
        )
    assert "<code>--strategy interactive</code>" in found["node page"]
    assert "set <code>speculative.strategy</code> = <code>ngram-suffix</code>" in found["node page"]


def test_the_same_node_without_the_field_keeps_the_prediction_and_says_it_is_one(client: Client) -> None:
    revision = glm()
    token = identity.create_node("demo-glm").token
    node = register(
        client, plan(revision, serving_strategy="interactive", operator_strategy=False, reports=()), token
    )
    post_timings(client, node, token)
    found = surfaces(client, revision)
    predicted = (
        "MTP weights unused (its reports do not name the strategy, and its version reports no serving "
        "strategy; predicted, not observed) — check the node's speculative.strategy: on v0.78.0, auto runs "
        "this revision "
        "with native MTP"
    )
    assert_everywhere(found, predicted)
    assert "none named (or not reported by this node's version)" in found["node page"]
    assert "MTP off by --strategy" not in found["node page"]


def test_a_manifest_that_declares_no_mtp_is_the_cause_only_where_the_node_confirms_it(client: Client) -> None:
    revision = glm("undeclared-mtp")
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, requested_strategy="auto", effective_strategy="disabled")
    register(client, node_plan, token)
    post_spans(client, node_plan, token)  # the decode spans name requested auto, effective disabled
    confirmed = "as the manifest predicts: it declares no MTP and the node confirms it"
    assert_everywhere(surfaces(client, revision), confirmed)


def test_the_control_a_manifest_cause_the_node_does_not_confirm_stays_a_prediction(client: Client) -> None:
    revision = glm("undeclared-mtp")
    token = identity.create_node("demo-glm").token
    node = register(client, plan(revision, effective_strategy="disabled"), token)
    post_timings(client, node, token)
    found = surfaces(client, revision)
    assert "predicted, not observed" in found["node api"]
    assert (
        "the node confirms it" not in found["node page"] and "the node confirms it" not in found["node api"]
    )


def test_a_contradiction_shows_what_was_predicted_and_what_the_node_reported(client: Client) -> None:
    """Predicted native MTP for auto on v0.78.0; it ran disabled with no serving strategy to explain it."""
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, requested_strategy="auto", effective_strategy="disabled")
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    found = surfaces(client, revision)
    assert "Contradicts the audit: demo-glm on mesh-llm 0.78.0 (v0.78.0)" in found["node api"]
    assert "spec_default = false" in found["node api"]
    for page in ("node page", "package page"):
        sides = found[page].split("<dt>Predicted</dt>", 1)[1].split("</dl>", 1)[0]
        assert "(mesh-llm v0.78.0, speculative.strategy auto)</dd>" in sides
        assert "<dt>Observed</dt><dd>requested auto, ran disabled" in sides
    node_api = client.get("/api/v1/nodes/demo-glm").json()["serving"][0]["advice"]
    assert node_api["cause"] == "contradiction" and node_api["observation"].startswith(
        "requested auto, ran disabled"
    )


def test_the_control_the_same_run_under_a_serving_strategy_that_set_disabled_is_no_contradiction(
    client: Client,
) -> None:
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, serving_strategy="throughput", operator_strategy=False)
    node = register(client, node_plan, token)
    assert node.plan.effective_strategy == "disabled"
    post_spans(client, node.plan, token)
    found = surfaces(client, revision)
    assert (
        "Contradicts the audit" not in found["node page"] and "<dt>Predicted</dt>" not in found["node page"]
    )
    assert "MTP off by --strategy throughput" in found["node api"]
    assert "throughput.last_stage_decode_batch = false" in found["node api"]


def test_an_mtp_sidecar_draft_the_node_names_explains_native_mtp_the_manifest_does_not_give(
    client: Client,
) -> None:
    revision = glm("consistent-no-mtp")
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, draft_name="GLM-4.7-Flash-MTP-draft.gguf", effective_strategy="native-mtp")
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    found = surfaces(client, revision)
    assert (
        "An MTP sidecar draft supplies MTP: the node names draft model GLM-4.7-Flash-MTP-draft.gguf"
        in found["node api"]
    )
    assert "An MTP sidecar draft supplies MTP" in found["node page"] and "cause-ok" in found["node page"]


def test_the_control_native_mtp_without_a_draft_contradicts_the_audit(client: Client) -> None:
    revision = glm("consistent-no-mtp")
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, effective_strategy="native-mtp")
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    assert "Contradicts the audit" in surfaces(client, revision)["node api"]


def test_native_mtp_that_drafted_nothing_names_the_break_even_gate_as_possible_only(client: Client) -> None:
    """mesh-llm reports no signal for the gate (docs/node-report.md 5): devnode emits none, meshdash names it.
    Possible only, labelled so."""
    revision = glm()
    token = identity.create_node("demo-glm").token
    register(client, plan(revision), token)
    node = identity.authenticate_node(token)
    assert node is not None
    for _ in range(3):
        f.make_report(
            node, revision, 20.0, at=datetime.now(UTC), effective_strategy="native-mtp", mtp_used=False
        )
    found = surfaces(client, revision)
    gate = "Possible cause, which mesh-llm reports no signal for: the break-even gate stood speculation down"
    assert gate in found["node api"] and gate in found["node page"]


def test_a_node_whose_stages_loaded_the_revision_is_confirmed_by_the_node(client: Client) -> None:
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, package_id=PACKAGE_ID)
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    assert NodeRun.objects.get().identity == NodeRun.Identity.CONFIRMED
    found = surfaces(client, revision)
    assert "confirmed by the node" in found["node page"] and "named in reports" not in found["node page"]
    assert client.get("/api/v1/nodes/demo-glm").json()["serving"][0]["identity"] == "confirmed"


def test_a_node_serving_bytes_no_tracked_revision_holds_is_flagged_as_unaudited(client: Client) -> None:
    """The control of the test above: the same node, its stages' admission.package_id another package's."""
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, package_id="sha256:" + "9" * 64)
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    assert NodeRun.objects.get().identity == NodeRun.Identity.UNAUDITED
    found = surfaces(client, revision)
    flagged = "Serves bytes meshdash has not audited: what the node says it loaded"
    assert_everywhere(found, flagged)
    assert "bytes meshdash has not audited</span>" in found["node page"]


def test_an_exchange_digest_naming_another_revision_names_that_revision(
    client: Client, tmp_path: Path
) -> None:
    older = glm(latest=False, manifest_sha256=f.sha256("the older manifest"))
    revision = f.make_revision(
        older.package, "consistent-mtp", schema_version=2, manifest_json={"package_id": "x"}
    )
    token = identity.create_node("demo-glm").token
    # The exchanges say the node serves the older revision (its commit, its manifest's digest), while
    # its package ref names the newer one.
    node_plan = plan(revision, model_revision=older.commit_sha, weights_digest=older.manifest_sha256)
    register(client, node_plan, token, exchange_log=str(tmp_path / "lifecycle-events.jsonl"))
    post_spans(client, node_plan, token)
    run = NodeRun.objects.get()
    assert run.identity == NodeRun.Identity.OTHER and run.served_revision_id == older.pk
    assert run.observations["provenance"]["weights_digest"] == older.manifest_sha256
    text = surfaces(client, revision)["node api"]
    assert text.startswith(f"Serves {older.commit_sha[:8]} by its own account")


def test_the_split_readiness_the_node_gives_shows_beside_its_topology(client: Client) -> None:
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, excluded_peer="oldpeer-7f3a")
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    body = client.get("/topologies/topo-run-glm/").content.decode()
    section = body.split('id="split-readiness"')[1].split("</section>")[0]
    assert "ready</span>" in section and "2 participants, 1 excluded" in section
    assert "<strong>stage_protocol_generation</strong> \u00d71" in section
    assert "Upgrade this peer; its stage protocol generation is too old for split serving." in section
    assert "Upgrade excluded peers so they advertise current stage protocol support." in section


def test_a_node_that_does_not_report_split_readiness_says_so(client: Client) -> None:
    revision = glm()
    token = identity.create_node("demo-glm").token
    node_plan = plan(revision, reports=())
    register(client, node_plan, token)
    post_spans(client, node_plan, token)
    section = client.get("/topologies/topo-run-glm/").content.decode().split('id="split-readiness"')[1]
    assert "not reported by this node's version" in section.split("</section>")[0]
