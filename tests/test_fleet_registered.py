"""What a node's agent registers (POST /api/v1/runs) shows on the fleet pages: devices, version, who holds
which stage; a peer that is not registered here is named, never linked."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.fleet import nodes as fleet_nodes
from packages_app.fleet import stages as fleet_stages
from packages_app.fleet import window as fleet_window
from packages_app.models import Report, Revision
from packages_app.nodes import agent_config, agent_runs, identity
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

TOPOLOGY = "topo-run-glm"


def plan_for(revision: Revision) -> payloads.RunPlan:
    """demo-glm holds stage 0 on CUDA0; stage 1 is on demo-glm-peer, which no one registered here."""
    return payloads.RunPlan(
        repo=revision.package.repo_id,
        ref=revision.commit_sha,  # a commit: the agent needs no Hub to resolve it
        run_id="run-glm",
        topology_id=TOPOLOGY,
        node_id="demo-glm",
        stages=(
            payloads.StagePlan("stage-0", "demo-glm", 0, 27, "CUDA0"),
            payloads.StagePlan("stage-1", "demo-glm-peer", 27, 41, "Metal"),
        ),
        version="0.78.0",
        effective_strategy="disabled",
    )


def register_through_the_agent(client: Client, plan: payloads.RunPlan, token: str) -> None:
    """What meshdash-agent reads from the node's console API, posted as it posts it."""
    with DevNode(plan) as node:
        config = agent_config.Config(node_url=node.url, token=token, hub_url="http://127.0.0.1:9")
        runs = agent_runs.read_runs(config, agent_runs.RefResolver(config.hub_url))
    response = client.post(
        "/api/v1/runs",
        json.dumps({"runs": runs}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200
    assert response.json()["results"][0]["revision_linked"] is True


def post_spans(client: Client, plan: payloads.RunPlan, token: str, n: int = 3) -> None:
    rng = random.Random(7)
    spans = []
    for _ in range(n):
        measured = payloads.decode(plan, rng, 128)
        attributes = payloads.span_attributes(plan, measured, "stage-0")
        spans.append(payloads.decode_span(attributes, rng, measured.predicted_ms))
    body = payloads.export_request(spans).SerializeToString()
    response = client.post(
        "/v1/traces", body, content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 200


@pytest.fixture
def registered(client: Client) -> Revision:
    revision = f.make_revision(f.make_package("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers"), "consistent-mtp")
    plan = plan_for(revision)
    token = identity.create_node("demo-glm").token
    register_through_the_agent(client, plan, token)
    post_spans(client, plan, token)  # OTLP spans name only their run id: no topology of their own
    assert Report.objects.filter(revision=revision, source=Report.Source.OTLP).count() == 3
    return revision


def cell(body: str, label: str, after: str) -> str:
    """The first table cell labelled ``label`` after the text ``after``."""
    rest = body.split(after, 1)[1]
    match = re.search(rf'<td data-label="{label}"[^>]*>(.*?)</td>', rest, re.S)
    assert match, (label, after)
    return match.group(1)


def test_the_needing_action_page_lays_out_a_registered_only_row_as_the_whole_list_does(
    client: Client,
) -> None:
    """A run registered without reports, of a revision its package has since bettered (and the node's
    release refuses): the filtered page reads its layers, stages and the node's devices from the run, as
    the whole list does."""
    package = f.make_package("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers")
    older = f.make_revision(package, "undeclared-mtp")
    f.make_revision(package, "consistent-mtp")  # the package's latest now, with a better headline
    register_through_the_agent(client, plan_for(older), identity.create_node("demo-glm").token)
    since = fleet_window.window_start()
    needing = [row for row in fleet_nodes.node_rows(since) if row.needs_action]
    (served,) = needing[0].serving
    assert not served.reported and served.advice.needs_action
    assert served.layer_range == "0..27" and [s.node for s in served.stages] == ["demo-glm", "demo-glm-peer"]
    assert needing[0].devices == ["CUDA0 (CUDA, 24 GiB)"]
    assert fleet_nodes.node_page(since, needs_action=True).rows == needing


def test_a_node_page_shows_the_devices_version_and_stage_owners_its_agent_registered(
    client: Client, registered: Revision
) -> None:
    body = client.get("/nodes/demo-glm/").content.decode()
    assert "CUDA0 (CUDA, 24 GiB)" in body  # selected_device: backend_device and vram_bytes
    assert "Metal" not in body.split("Split certification")[0]  # the peer's device is not this node's
    assert "0.78.0" in body
    assert "This node holds layers <strong>0..27</strong>" in body
    assert f'href="/topologies/{TOPOLOGY}/"' in body
    stages = body.split("Who holds which stage")[1].split("</table>")[0]
    assert "<strong>demo-glm</strong> (this node)" in stages
    assert 'demo-glm-peer <span class="muted">(not registered)</span>' in stages
    assert "/nodes/demo-glm-peer/" not in body
    assert "27..41" in stages and "Metal (24 GiB)" in stages


def test_the_nodes_page_shows_the_registered_devices_layers_and_topology(
    client: Client, registered: Revision
) -> None:
    body = client.get("/nodes/").content.decode()
    assert "CUDA0 (CUDA, 24 GiB)" in body and "0.78.0" in body
    layers = cell(body, "Layers", registered.commit_sha[:8])
    assert "layers 0..27 of <code>0..27|27..41</code>" in layers
    assert f'href="/topologies/{TOPOLOGY}/"' in layers


def test_a_topology_page_names_each_stages_node_and_links_only_registered_ones(
    client: Client, registered: Revision
) -> None:
    body = client.get(f"/topologies/{TOPOLOGY}/").content.decode()
    stages = body.split('id="stages"')[1].split("</table>")[0]
    assert '<a href="/nodes/demo-glm/">demo-glm</a>' in stages
    assert "demo-glm-peer" in stages and "(not registered)" in stages
    assert "/nodes/demo-glm-peer/" not in body
    assert "CUDA0 (CUDA, 24 GiB)" in stages and "27..41" in stages


def test_a_peer_links_once_it_registers(client: Client, registered: Revision) -> None:
    identity.create_node("demo-glm-peer")
    body = client.get(f"/topologies/{TOPOLOGY}/").content.decode()
    assert '<a href="/nodes/demo-glm-peer/">demo-glm-peer</a>' in body


def test_an_unknown_node_or_topology_leads_back_to_the_nodes(client: Client, db: None) -> None:
    for url in ("/nodes/demo-glm-peer/", "/topologies/nowhere/"):
        response = client.get(url)
        assert response.status_code == 404
        body = response.content.decode()
        assert '<a href="/nodes/">Back to Nodes</a>' in body and "Back to the catalog" not in body
    assert "Back to the catalog" in client.get("/packages/meshllm/Nothing-layers/").content.decode()


@pytest.mark.parametrize(
    ("device", "label"),
    [
        ({"backend_device": "CUDA0", "vram_bytes": 25_769_803_776}, "CUDA0 (CUDA, 24 GiB)"),
        ({"backend_device": "Vulkan1", "vram_bytes": 8 * 2**29}, "Vulkan1 (Vulkan, 4.0 GiB)"),
        ({"backend_device": "Metal", "vram_bytes": None}, "Metal"),
        ({"backend_device": "CPU", "vram_bytes": 512 * 2**20}, "CPU (512 MiB)"),
        ({"name": "RTX 4090"}, "RTX 4090"),
        ({"vram_bytes": 1}, ""),
        ("Metal", "Metal"),
    ],
)
def test_a_device_reads_as_its_name_backend_and_vram(device: Any, label: str) -> None:
    assert fleet_stages.device_label(device) == label


def test_a_nodes_devices_are_those_of_its_own_stages_when_a_stage_names_it() -> None:
    stages = [
        {"node_id": "a", "device": "CUDA0", "raw": {"selected_device": {"backend_device": "CUDA0"}}},
        {"node_id": "b", "device": "Metal"},
    ]
    devices = [{"backend_device": "CUDA0"}, {"backend_device": "Metal"}]
    assert fleet_stages.node_devices(stages, devices, "a") == ["CUDA0 (CUDA)"]
    assert fleet_stages.node_devices(stages, devices, "elsewhere") == ["CUDA0 (CUDA)", "Metal"]
    assert fleet_stages.node_devices([], "not a list", "a") == []


def test_tok_s_values_render_in_the_row_of_their_revision(client: Client) -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    body = client.get("/nodes/").content.decode()
    (group,) = [g for g in re.findall(r"<tbody[^>]*>(.*?)</tbody>", body, re.S) if "/nodes/gpu-box-1/" in g]
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", group, re.S):
        sha = re.search(r"<code>([0-9a-f]{8})</code>", row)
        assert sha, row
        rows[sha.group(1)] = row
    assert set(rows) == {broken.commit_sha[:8], fixed.commit_sha[:8]}
    for sha, median in ((fixed.commit_sha[:8], "5.3"), (broken.commit_sha[:8], "3.1")):
        tps = re.search(r'<td data-label="tok/s"[^>]*>([^<]*)</td>', rows[sha])
        assert tps and tps.group(1).startswith(median), (sha, tps)


def test_registered_runs_add_no_queries_to_the_fleet_pages(client: Client, registered: Revision) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    pages = ["/nodes/", "/nodes/demo-glm/", f"/topologies/{TOPOLOGY}/"]

    def counts() -> list[int]:
        found = []
        for url in pages:
            with CaptureQueriesContext(connection) as queries:
                assert client.get(url).status_code == 200
            found.append(len(queries))
        return found

    few = counts()
    for i in range(4):
        other = f.make_revision(f.make_package(f"meshllm/Other-{i}-layers"), "undeclared-mtp")
        for name in (f"box-{i}", "demo-glm"):
            plan = payloads.RunPlan(
                repo=other.package.repo_id,
                ref=other.commit_sha,
                run_id=f"run-{name}-{i}",
                topology_id=TOPOLOGY,
                node_id=name,
                stages=(
                    payloads.StagePlan("s0", name, 0, 20, "CUDA0"),
                    payloads.StagePlan("s1", f"peer-{i}", 20, 41, "CUDA1"),
                ),
            )
            token = (
                identity.create_node(name).token
                if name != "demo-glm"
                else identity.rotate_node_token(identity.get_node("demo-glm")).token
            )
            register_through_the_agent(client, plan, token)
            post_spans(client, plan, token, n=2)
    assert counts() == few


def test_the_needing_action_page_places_each_row_as_the_whole_list_does(registered: Revision) -> None:
    """The filtered page judges every node without where its reports place it, then places its own rows:
    the same layers, stages (each peer registered or not), topology and medians as the whole list."""
    identity.create_node("demo-glm-peer")
    since = fleet_window.window_start()
    needing = [row for row in fleet_nodes.node_rows(since) if row.needs_action]
    assert [row.node.name for row in needing] == ["demo-glm"]
    page = fleet_nodes.node_page(since, needs_action=True)
    assert page.rows == needing
    (served,) = page.rows[0].serving
    assert served.tps is not None and served.layer_range == "0..27" and served.topology_id == TOPOLOGY
    assert [(s.node, s.registered) for s in served.stages] == [("demo-glm", True), ("demo-glm-peer", True)]


def test_the_releases_of_a_revisions_runs_are_read_from_the_index_alone(registered: Revision) -> None:
    """The compare page and the speedups read each node's release from noderun_revision_nodes, which
    carries it: the runs' rows (a page each, with their stages and observations) are never read."""
    from django.db import connection

    from packages_app.models import NodeRun

    if connection.vendor != "postgresql":
        pytest.skip("an index's INCLUDE columns are PostgreSQL's (SQLite leaves them out)")
    assert list(NodeRun.objects.releases([registered.pk])) == [
        (registered.pk, registered.node_runs.get().node_id, "0.78.0")
    ]
    with connection.cursor() as cursor:  # a few rows: make the planner use an index if one can answer
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
    assert (
        "Index Only Scan using noderun_revision_nodes" in NodeRun.objects.releases([registered.pk]).explain()
    )
    # The control: a column the index does not carry sends the same read to the runs' rows.
    stages = (
        NodeRun.objects.filter(revision_id__in=[registered.pk]).exclude(version="").order_by("updated_at")
    )
    plan = stages.values_list("revision_id", "node_id", "stages").explain()
    assert "noderun_revision_nodes" in plan and "Index Only Scan" not in plan
