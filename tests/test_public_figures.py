"""Whose reports make a revision's public figures (issue 48; docs/fleet.md): a node that never registered a
run of a revision does not move them, and a registered node counts at most
MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY of its reports of a revision a day. Every report is still stored and
still on its node's own page. Each guard with the attack it stops and its control."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from django.core.cache import cache
from django.test import Client

from packages_app import throughput
from packages_app.catalog.throughput import catalog_throughput
from packages_app.fleet import nodes as fleet_nodes
from packages_app.fleet import window as fleet_window
from packages_app.models import Node, Report, Revision, Rollup
from packages_app.nodes import identity
from packages_app.rollups import public_weight
from packages_app.rollups.rebuild import rebuild
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

ATTACK_TPS = 994_912.0  # the figure
HONEST = (4.9, 5.0, 5.1)


@pytest.fixture(autouse=True)
def _quiet(settings: Any) -> Iterator[None]:
    cache.clear()  # the rate limiter lives there
    from packages_app import tasks

    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit"):
        yield


@pytest.fixture
def revision() -> Revision:
    package = f.qwen35_package(with_history=False)
    return package.revisions.get(commit_sha=f.QWEN35_SHA)


def report_body(revision: Revision, tps: float, at: datetime) -> dict[str, Any]:
    return {
        "report_id": str(uuid.uuid4()),
        "observed_at": at.isoformat(),
        "package": {"repo": revision.package.repo_id, "revision": revision.commit_sha},
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "disabled",
            "mtp_source": "Disabled",
        },
        "timings": {"predicted_n": 256, "predicted_per_second": tps},
    }


def post_reports(client: Client, token: str, revision: Revision, values: list[float]) -> None:
    now = datetime.now(UTC).replace(minute=30)  # one day, one hour: the daily cap's unit
    for start in range(0, len(values), 500):  # the batch endpoint's 500
        chunk = values[start : start + 500]
        answer = client.post(
            "/api/v1/reports/batch",
            json.dumps({"reports": [report_body(revision, tps, now) for tps in chunk]}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert answer.status_code in (200, 201, 207), answer.content


def register_run(client: Client, token: str, revision: Revision, run_id: str = "run-1") -> None:
    """What the agent does: POST /api/v1/runs naming the package ref, resolved to the revision's commit."""
    run = {
        "run_id": run_id,
        "package_ref": f"{revision.package.repo_id}@main",
        "package": {"repo": revision.package.repo_id, "revision": revision.commit_sha},
        "version": "0.78.0",
    }
    answer = client.post(
        "/api/v1/runs",
        json.dumps({"runs": [run]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.json()["results"][0]["status"] == 200, answer.content


def honest_fleet(client: Client, revision: Revision, nodes: int = 2, each: int = 30) -> None:
    for n in range(nodes):
        token = identity.create_node(f"honest-{n}").token
        register_run(client, token, revision, f"run-honest-{n}")
        post_reports(client, token, revision, [HONEST[i % 3] for i in range(each)])


def public_median(client: Client, revision: Revision) -> float | None:
    """The median decode rate the public places show, read from each: the package page's figures, the
    catalog's and the read API's; all three agree."""
    page = throughput.revision_throughput(revision.pk)
    assert page is not None
    catalog = catalog_throughput([revision.pk])[revision.pk]
    assert catalog.tps_no_mtp == page.mtp_off.tps
    detail = client.get(f"/api/v1/packages/{revision.package.repo_id}").json()
    (api,) = [t["mtp_off"]["tps"] for t in found(detail, "throughput") if t and "mtp_off" in t]
    assert api == pytest.approx(page.mtp_off.tps, abs=0.01)
    return page.mtp_off.tps


def found(value: Any, key: str) -> Iterator[Any]:
    """Every value under ``key`` anywhere in a JSON document."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from found(v, key)
    elif isinstance(value, list):
        for item in value:
            yield from found(item, key)


def test_an_unregistered_node_flooding_a_public_revision_does_not_move_its_median(
    client: Client, revision: Revision
) -> None:
    honest_fleet(client, revision)
    before = public_median(client, revision)
    attacker = identity.create_node("flood")
    post_reports(client, attacker.token, revision, [ATTACK_TPS] * 1_000)

    assert Report.objects.filter(node=attacker.node).count() == 1_000  # stored, every one
    assert public_median(client, revision) == before and before is not None and before < 6
    page = throughput.revision_throughput(revision.pk)
    assert page is not None and page.reports == 60 and page.nodes == 2  # the honest nodes' only
    assert all(row["node_name"] != "flood" for row in page.recent)
    # Its own page still shows what it sent.
    rows = {r.node.name: r for r in fleet_nodes.node_rows(fleet_window.window_start(1))}
    (served,) = rows["flood"].serving
    assert served.reports == 1_000 and served.tps is not None and served.tps > 900_000


def test_control_without_the_registration_rule_the_flood_moves_the_median_to_994912(
    client: Client, revision: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    def everyone(
        revision_ids: Iterable[int], node_ids: Iterable[int] | None = None, *, using: str = "default"
    ) -> set[tuple[int, int]]:
        """Every node as if it had registered a run of every revision (ids as the database gave them:
        PostgreSQL's sequences do not restart between tests)."""
        nodes = Node.objects.using(using).values_list("pk", flat=True) if node_ids is None else node_ids
        return {(node, rev) for node in nodes for rev in revision_ids}

    monkeypatch.setattr(public_weight, "registered_pairs", everyone)  # the guard off: every node counts
    honest_fleet(client, revision)
    post_reports(client, identity.create_node("flood").token, revision, [ATTACK_TPS] * 1_000)
    median = public_median(client, revision)
    assert median is not None and abs(median - ATTACK_TPS) <= 0.01 * ATTACK_TPS  # the figure


def test_a_node_that_registers_its_run_after_reporting_then_counts(
    client: Client, revision: Revision
) -> None:
    honest_fleet(client, revision, nodes=1, each=30)
    late = identity.create_node("late")
    post_reports(client, late.token, revision, [7.0] * 30)
    assert throughput.revision_throughput(revision.pk).reports == 30  # type: ignore[union-attr]
    register_run(client, late.token, revision, "run-late")
    page = throughput.revision_throughput(revision.pk)
    assert page is not None and page.reports == 60 and page.nodes == 2
    register_run(client, late.token, revision, "run-late-2")  # registered already: nothing added twice
    assert throughput.revision_throughput(revision.pk).reports == 60  # type: ignore[union-attr]
    post_reports(client, late.token, revision, [7.0] * 5)  # and what it sends next counts at once
    assert throughput.revision_throughput(revision.pk).reports == 65  # type: ignore[union-attr]


def test_a_registered_node_counts_at_most_its_daily_share_and_does_not_outvote_three_others(
    client: Client, revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY = 40
    honest_fleet(client, revision, nodes=3, each=50)
    loud = identity.create_node("loud")
    register_run(client, loud.token, revision, "run-loud")
    post_reports(client, loud.token, revision, [ATTACK_TPS] * 600)

    page = throughput.revision_throughput(revision.pk)
    assert page is not None and page.reports == 4 * 40  # each node: at most 40 of its reports that day
    median = public_median(client, revision)
    assert median is not None and median < 6  # 40 of 160: a quarter of the vote, not the median
    own = Rollup.objects.filter(node_key=loud.node.pk, grain=Rollup.Grain.TOTAL)
    assert sum(own.values_list("reports", flat=True)) == 600  # all on its own cells
    assert rebuild([revision.pk]) == 150 + 600  # a rebuild keeps the same rule
    assert throughput.revision_throughput(revision.pk).reports == 160  # type: ignore[union-attr]
    assert public_median(client, revision) == median


def test_control_without_the_daily_cap_the_registered_node_outvotes_the_others(
    client: Client, revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY = 10**9
    honest_fleet(client, revision, nodes=3, each=50)
    loud = identity.create_node("loud")
    register_run(client, loud.token, revision, "run-loud")
    post_reports(client, loud.token, revision, [ATTACK_TPS] * 600)
    median = public_median(client, revision)
    assert median is not None and median > 900_000  # 600 of 750 reports


def test_the_default_cap_is_a_report_a_minute(settings: Any) -> None:
    import meshdash.settings

    assert meshdash.settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY == 24 * 60


def test_a_days_cap_counts_what_an_earlier_batch_took(
    client: Client, revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY = 25
    token = identity.create_node("steady").token
    register_run(client, token, revision)
    for _ in range(4):
        post_reports(client, token, revision, [5.0] * 10)
    assert throughput.revision_throughput(revision.pk).reports == 25  # type: ignore[union-attr]


def test_the_registered_nodes_a_page_reads_are_registered_pairs_own_in_each_way_of_naming_it() -> None:
    """registered_nodes (the filter of the package page's per-node reads) names the same nodes
    as registered_pairs (what the store counts): a run resolved to the revision, one whose identity named
    it, one that named its repo and commit before it was ingested; not a run of the same repo's other
    commit, nor of the same commit under another repo, nor of another revision."""
    from packages_app.models import NodeRun

    package = f.qwen35_package(with_history=True)
    revision = package.revisions.get(commit_sha=f.QWEN35_SHA)
    other = package.revisions.exclude(pk=revision.pk).first()
    assert other is not None
    elsewhere = f.make_package("someone/else")
    runs = {
        "resolved": {"revision": revision},
        "served": {"revision": other, "served_revision": revision},
        "named": {"repo_id": package.repo_id, "commit_sha": revision.commit_sha},
        "other commit": {"repo_id": package.repo_id, "commit_sha": other.commit_sha},
        "other repo": {"repo_id": elsewhere.repo_id, "commit_sha": revision.commit_sha},
        "other revision": {"revision": other, "repo_id": package.repo_id, "commit_sha": other.commit_sha},
    }
    nodes = {}
    for name, fields in runs.items():
        nodes[name] = f.make_node(name.replace(" ", "-"))
        NodeRun.objects.create(node=nodes[name], run_id=f"run-{name}", **fields)
    expected = {nodes[name].pk for name in ("resolved", "served", "named")}
    pairs = public_weight.registered_pairs([revision.pk])
    assert {node for node, _ in pairs} == expected
    assert (
        set(
            Node.objects.filter(public_weight.registered_nodes(revision.pk, "pk")).values_list(
                "pk", flat=True
            )
        )
        == expected
    )
    assert not Node.objects.filter(public_weight.registered_nodes(999_999, "pk")).exists()
