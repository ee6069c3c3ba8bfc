"""The speedups' sides merge their cells' decode sketches (packages_app.speedup_cells.merged_sketches): on
PostgreSQL the bins are added up in SQL, on SQLite in Python; either way each side's sketch is its cells'
stored sketches merged, for sides that share cells, repeat a cell or hold none."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from packages_app import sketch, speedup_cells
from packages_app.models import Revision, SplitRollup
from packages_app.speedup_cells import NodeCell
from tests.dashboard_factories import BASE_TIME, make_node, make_package, make_report, make_revision

pytestmark = pytest.mark.django_db


def _fleet(seed: int) -> Revision:
    """Nodes reporting random decode rates with MTP on and off, on two stage splits."""
    rng = random.Random(seed)
    revision = make_revision(make_package(f"meshllm/Sketched{seed}-layers"), "consistent-mtp")
    for n in range(4):
        node = make_node(f"sketch-{seed}-{n}")
        for i in range(rng.randint(3, 12)):
            make_report(
                node,
                revision,
                rng.choice((0.5, 3.0, 7.25, 42.0, 180.0)) * rng.uniform(0.9, 1.1),
                at=BASE_TIME + timedelta(minutes=i),
                mtp_used=rng.random() < 0.5,
                stage_splits=rng.choice(("0..27|27..41", "0..41")),
            )
    return revision


def _stored(cells: list[NodeCell]) -> sketch.Sketch:
    """What a side's sketch must be: its cells' sketches read through the ORM, merged."""
    stored = dict(SplitRollup.objects.filter(pk__in=[c.id for c in cells]).values_list("pk", "tps_sketch"))
    return sketch.merged(sketch.from_json(stored[c.id]) for c in cells)


def _random_sides(cells: list[NodeCell], rng: random.Random) -> list[list[NodeCell]]:
    """Sides as the speedups make them, and harder: overlapping, a cell twice, an empty side."""
    return [
        [c for c in cells if c.mtp_used],
        [c for c in cells if not c.mtp_used],
        rng.sample(cells, k=min(3, len(cells))) * 2,
        [],
        cells,
    ]


@pytest.mark.parametrize("seed", range(3))
def test_each_side_is_its_cells_sketches_merged(seed: int) -> None:
    revision = _fleet(seed)
    cells = speedup_cells.node_cells(revision.pk)
    assert len(cells) >= 4
    sides = _random_sides(cells, random.Random(seed))
    merged = speedup_cells.merged_sketches(sides)
    assert merged == [_stored(side) for side in sides]
    assert merged[3] == {} and sum(merged[-1].values()) == sum(c.tps_n for c in cells)


def test_no_side_with_a_cell_reads_nothing(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    with django_assert_num_queries(0):
        assert speedup_cells.merged_sketches([[], []]) == [{}, {}]


def test_the_bins_are_added_up_per_side_in_sql() -> None:
    """The control: bins added up over every side at once (not per side) give the sides' union, which the
    check above tells apart from each side's own sketch."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the bins are added up in SQL on PostgreSQL only")
    revision = _fleet(7)
    cells = speedup_cells.node_cells(revision.pk)
    on, off = [c for c in cells if c.mtp_used], [c for c in cells if not c.mtp_used]
    assert on and off
    sql = speedup_cells._merged_sql()
    assert sql.count("s.side") == 2
    mixed = sql.replace("SELECT s.side,", "SELECT 0,").replace("GROUP BY s.side, b.bin", "GROUP BY b.bin")
    with connection.cursor() as cursor:
        ids = [c.id for c in [*on, *off]]
        cursor.execute(mixed, [ids, [0] * len(on) + [1] * len(off)])
        union = {int(index): int(count) for _, index, count in cursor.fetchall()}
    assert union == _stored([*on, *off]) != _stored(on)
    assert speedup_cells.merged_sketches([on, off]) == [_stored(on), _stored(off)]
