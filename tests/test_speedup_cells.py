"""The speedups read a revision's cells from the kept SplitRollup rows (packages_app.speedup_cells): one a
node's stage split with MTP used or not. After every event that changes them (reports stored, registered
or not, over several strategies and topologies, MTP on and off; a run registered after its node's reports;
a node deleted; the rollups rebuilt) they are what the revision's per-node total cells say. The reference
is the reading the speedups made before the rows were kept: every registered node's total Rollup cells,
their sketches merged per side."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from packages_app import baselines, sketch, speedup_cells
from packages_app.models import Node, Revision, Rollup, SplitRollup
from packages_app.rollups.public_weight import registered_pairs
from packages_app.speedup_cells import NodeCell
from tests import dashboard_factories as f
from tests.fleet_events import FleetEvents
from tests.rollup_checks import assert_split_rollups_add_up_the_node_total_cells

pytestmark = pytest.mark.django_db

STRATEGIES = [("auto", "native-mtp", True), ("mtp", "native-mtp", True), ("auto", "disabled", False)]
STRATEGIES += [("disabled", "disabled", False), ("auto", "ngram", False)]


def total_cells(revision_id: int) -> list[NodeCell]:
    """The revision's registered nodes' per-node total Rollup cells, as the speedups read them before."""
    registered = {node for node, _ in registered_pairs([revision_id])}
    cells = Rollup.objects.filter(revision_id=revision_id, grain="total", node_key__in=registered)
    return [
        NodeCell._make(row) for row in cells.exclude(node_key=Rollup.ALL_NODES).values_list(*NodeCell._fields)
    ]


def merged_total_cells(sides: Sequence[Sequence[NodeCell]]) -> list[sketch.Sketch]:
    stored = dict(Rollup.objects.values_list("pk", "tps_sketch"))
    return [sketch.merged(sketch.from_json(stored[c.id]) for c in side) for side in sides]


def grouped(cells: list[NodeCell]) -> dict[tuple[int, str, bool], tuple[int, int, int, int]]:
    """Per node, stage split and MTP used: reports, accepted, proposed and decode rates added up."""
    added: dict[tuple[int, str, bool], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for cell in cells:
        figures = added[(cell.node_key, cell.stage_splits, cell.mtp_used)]
        for index, value in enumerate((cell.reports, cell.accepted, cell.proposed, cell.tps_n)):
            figures[index] += value
    return {key: (a, b, c, d) for key, (a, b, c, d) in added.items()}


def assert_read_as_computed(revisions: list[Revision], monkeypatch: pytest.MonkeyPatch) -> None:
    assert_split_rollups_add_up_the_node_total_cells()
    for revision in revisions:
        kept, cells = speedup_cells.node_cells(revision.pk), total_cells(revision.pk)
        assert grouped(kept) == grouped(cells)
        assert len(kept) == len(grouped(kept))  # one row a node's split and MTP used
        assert speedup_cells.ran(revision.pk) == {c.mtp_used for c in cells}
        # Each (node, split, MTP used) row's sketch is its total cells' sketches merged.
        groups = [[c for c in cells if (c.node_key, c.stage_splits, c.mtp_used) == key[1:4]] for key in kept]
        assert speedup_cells.merged_sketches([[c] for c in kept]) == merged_total_cells(groups)
    shown = [baselines.speedups(r.package, r, before) for r in revisions for before in (None, *revisions)]
    with monkeypatch.context() as before:
        before.setattr(speedup_cells, "node_cells", total_cells)
        before.setattr(baselines, "merged_sketches", merged_total_cells)
        computed = [
            baselines.speedups(r.package, r, other) for r in revisions for other in (None, *revisions)
        ]
    assert shown == computed


def test_random_fleets_speedup_cells_are_their_total_cells_after_every_event(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Random events on two revisions with MTP weights: after each, the kept rows add up the total cells and
    the speedups (MTP on against off, and across the revisions) are the ones the total cells give."""
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 100_000  # BASE_TIME is in the past: keep its hour rollups
    rng = random.Random(46)
    package = f.make_package("meshllm/Split-layers")
    revisions = [f.make_revision(package, "consistent-mtp"), f.make_revision(package, "undeclared-mtp")]
    events = FleetEvents(rng, [f.make_node(f"box-{i}") for i in range(6)])

    def report(node: Node, revision: Revision, at: datetime) -> None:
        requested, effective, mtp = rng.choice(STRATEGIES)
        f.make_report(
            node,
            revision,
            rng.choice([2.5, 3.1, 4.0, 6.2, 11.0]),
            at=at,
            registered=rng.random() < 0.75,
            mtp_used=mtp,
            requested_strategy=requested,
            effective_strategy=effective,
            stage_splits=rng.choice(["0..20|20..41", "0..41"]),
            topology_id=rng.choice(["two-node", "lab-2"]),
        )

    pairs = 0
    for step in range(45):
        events.step(step, revisions, report)
        assert_read_as_computed(revisions, monkeypatch)
        pairs += sum(baselines.speedups(package, r).mtp is not None for r in revisions)
    assert pairs > 10  # MTP on against off was shown, not only its absence
    # Fewer rows than total cells: the strategies and topologies were added up.
    assert SplitRollup.objects.count() < Rollup.objects.filter(grain="total").exclude(node_key=0).count()
    live = SplitRollup.objects.filter(node_key__in=Node.objects.values("pk"))
    fields = ("revision_id", "node_key", "stage_splits", "mtp_used", "reports", "tps_n", "last_at")
    kept = sorted(live.values_list(*fields))
    assert len(kept) < SplitRollup.objects.count()  # some node was deleted
    call_command("rebuild_rollups", "--force", stdout=StringIO())
    assert sorted(SplitRollup.objects.values_list(*fields)) == kept
    assert_read_as_computed(revisions, monkeypatch)
