"""The package page's plans, node count and alert read from the kept PlanRollup rows (node_plans) are what the
revision's per-node total cells say, after every event that changes them: reports stored (registered or
not, several topologies, MTP on and off), a run registered after its node's reports, a node deleted, the
rollups rebuilt. The reference here is the computation the page made before the rows were kept: every
registered node's total cells, grouped into plans in Python."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Sum

from packages_app import node_plans, sketch
from packages_app.models import Node, PlanRollup, Revision, Rollup
from packages_app.rollups.public_weight import registered_pairs
from packages_app.throughput import revision_throughput
from tests import dashboard_factories as f
from tests.fleet_events import FleetEvents
from tests.rollup_checks import assert_plan_rollups_add_up_the_node_total_cells

pytestmark = pytest.mark.django_db

PLAN_ROWS, ALERT_NAMES = 3, 2  # small cuts, so that random fleets tie at them


@pytest.fixture(autouse=True)
def small_cuts(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setattr(node_plans, "PLAN_ROWS", PLAN_ROWS)
    monkeypatch.setattr(node_plans, "ALERT_NAMES", ALERT_NAMES)
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 100_000  # BASE_TIME is in the past: keep its hour rollups


def expected(
    revision: Revision,
) -> tuple[list[node_plans.NodePlan], int, tuple[int, int, tuple[str, ...]] | None]:
    """The plans, node count and alert (reports, nodes, names) from the per-node total cells."""
    registered = {node for node, _ in registered_pairs([revision.pk])}
    cells = Rollup.objects.filter(revision=revision, grain="total", node_key__in=registered)
    names = dict(Node.objects.values_list("pk", "name"))
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for cell in cells.values():
        key = (cell["node_key"], cell["stage_splits"], cell["requested_strategy"], cell["strategy"])
        groups[key].append(cell)
    plans = []
    for (node, splits, requested, effective), group in groups.items():
        plans.append(
            node_plans.NodePlan(
                node=names.get(node, ""),
                stage_splits=splits,
                requested_strategy=requested,
                effective_strategy=effective,
                differs=not node_plans.plan_honoured(requested, effective),
                reports=sum(c["reports"] for c in group),
                from_spans=sum(c["from_spans"] for c in group),
                tps=sketch.median(sketch.merged(sketch.from_json(c["tps_sketch"]) for c in group)),
                last_seen=max(c["last_at"] for c in group),
                unused=sum(c["unused"] for c in group),
            )
        )
    plans.sort(key=lambda p: (-p.reports, p.node, p.stage_splits, p.requested_strategy, p.effective_strategy))
    nodes = len({key[0] for key in groups})
    every = Rollup.objects.filter(revision=revision, grain="total", node_key=Rollup.ALL_NODES)
    unused = sum(every.values_list("unused", flat=True))
    by_node: dict[int, int] = defaultdict(int)
    for (node, *_), group in groups.items():
        by_node[node] += sum(c["unused"] for c in group)
    alerted = {node: n for node, n in by_node.items() if n}
    if not (unused and revision.mtp_detected and nodes):
        return plans[:PLAN_ROWS], nodes, None
    named = sorted((-n, names[node]) for node, n in alerted.items() if names.get(node))
    return plans[:PLAN_ROWS], nodes, (unused, len(alerted), tuple(name for _, name in named[:ALERT_NAMES]))


def assert_kept_as_computed(revision: Revision) -> None:
    assert_plan_rollups_add_up_the_node_total_cells()
    figures = revision_throughput(revision.pk, mtp_detected=revision.mtp_detected)
    plans, nodes, alert = expected(revision)
    if figures is None:
        assert not plans and nodes == 0
        return
    assert figures.plans == plans
    assert figures.nodes == nodes
    got = figures.alert and (figures.alert.reports, figures.alert.nodes, figures.alert.names)
    assert got == alert


def test_random_fleets_plans_count_and_alert_are_their_cells_after_every_event() -> None:
    """Random events on two revisions (one with MTP weights): after each, the kept rows add up the cells and
    the page's plans, node count and alert are the ones computed from the cells."""
    rng = random.Random(43)
    package = f.make_package("meshllm/Planned-layers")
    revisions = [f.make_revision(package, "undeclared-mtp"), f.make_revision(package, "consistent-no-mtp")]
    events = FleetEvents(rng, [f.make_node(f"box-{i}") for i in range(7)])

    def report(node: Node, revision: Revision, at: datetime) -> None:
        f.make_report(
            node,
            revision,
            rng.choice([2.5, 3.1, 4.0, 6.2, 11.0]),
            at=at,
            registered=rng.random() < 0.7,
            mtp_used=rng.random() < 0.4,
            requested_strategy=rng.choice(["auto", "mtp", "disabled"]),
            stage_splits=rng.choice(["0..20|20..41", "0..27|27..41"]),
            topology_id=rng.choice(["two-node", "lab-2"]),
        )

    for step in range(60):
        events.step(step, revisions, report)
        for shown in revisions:
            assert_kept_as_computed(shown)
    assert PlanRollup.objects.exists()
    # Rebuilt from the raw reports, the rows of the nodes still there are the kept ones (a deleted node's
    # reports went with it: --force drops what its cells counted).
    live = PlanRollup.objects.filter(node_key__in=Node.objects.values("pk"))
    kept = sorted(live.values_list("revision_id", "node_key", "stage_splits", "reports", "unused", "last_at"))
    assert len(kept) < PlanRollup.objects.count()  # some node was deleted
    call_command("rebuild_rollups", "--force", stdout=StringIO())
    rebuilt = PlanRollup.objects.values_list(
        "revision_id", "node_key", "stage_splits", "reports", "unused", "last_at"
    )
    assert sorted(rebuilt) == kept
    for shown in revisions:
        assert_kept_as_computed(shown)


def test_a_plan_at_the_cut_ties_are_decided_by_name_and_a_deleted_nodes_plans_leave() -> None:
    """Four nodes tie at one report below the busiest: the cut of three keeps the busiest and the first two
    by name. Deleting one of those two brings in the next by name. Control: the kept rows still hold the
    deleted node's plan (its cells stay), so it is the registration filter that leaves it out."""
    package = f.make_package("meshllm/Tied-layers")
    revision = f.make_revision(package, "consistent-no-mtp")
    made = {name: f.make_node(name) for name in ("node-e", "node-d", "node-c", "node-b", "node-a")}
    for node in made.values():
        f.make_report(node, revision, 3.0)
    f.make_report(made["node-e"], revision, 3.0, at=f.BASE_TIME + timedelta(hours=1))
    figures = revision_throughput(revision.pk)
    assert figures is not None and figures.nodes == 5
    assert [(p.node, p.reports) for p in figures.plans] == [("node-e", 2), ("node-a", 1), ("node-b", 1)]
    gone = made["node-a"].pk
    made["node-a"].delete()
    figures = revision_throughput(revision.pk)
    assert figures is not None and figures.nodes == 4
    assert [(p.node, p.reports) for p in figures.plans] == [("node-e", 2), ("node-b", 1), ("node-c", 1)]
    assert PlanRollup.objects.filter(revision=revision, node_key=gone).exists()
    assert_kept_as_computed(revision)


def test_the_alerts_nodes_are_read_from_the_index_of_the_plans_showing_mtp_unused() -> None:
    """unused_by_node reads planrollup_unused alone: the plans whose reports show MTP unused, not every plan
    of the revision (on the catalog seed's busiest revision with MTP, 360 of 720). Control: a filter the
    index's condition does not cover sends the same read to the plans' rows."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("an index's INCLUDE columns are PostgreSQL's (SQLite leaves them out)")
    revision = f.make_revision(f.make_package("meshllm/Indexed-layers"), "undeclared-mtp")
    on, off = f.make_node("mtp-on"), f.make_node("mtp-off")
    f.make_report(on, revision, 6.0, mtp_used=True)
    f.make_report(off, revision, 3.0, mtp_used=False, requested_strategy="auto")
    assert node_plans.unused_by_node(revision.pk) == {off.pk: 1}
    with connection.cursor() as cursor:  # a few rows: make the planner use an index if one can answer
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
    assert "Index Only Scan using planrollup_unused" in node_plans._unused_of(revision.pk).explain()
    every = node_plans._public(revision.pk).filter(unused__gte=0).values("node_key").annotate(n=Sum("unused"))
    assert "planrollup_unused" not in every.values_list("node_key", "n").explain()
