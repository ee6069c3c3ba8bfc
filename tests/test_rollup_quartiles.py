"""The decode-rate quartiles of each timeline point, kept on its RevisionRollup rows (rollups.quartiles):
the timeline reads them, and they are the point's sketches' on every path that writes one (the store paths
and the rebuilds are also checked by tests.rollup_checks wherever the rollup tests call it)."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command

from packages_app import reports, sketch, throughput
from packages_app.models import Package, Revision, RevisionRollup, Rollup
from packages_app.rollups import quartiles
from tests.migrating import back_to_the_leaf, migrate  # noqa: F401 (a fixture)
from tests.rollup_checks import assert_quartiles_kept
from tests.test_rollups import REPO, SHA, body, node, valid


@pytest.fixture
def revision() -> Revision:
    package = Package.objects.create(repo_id=REPO, private=False)
    return Revision.objects.create(package=package, commit_sha=SHA, mtp_detected=True)


def store(revision: Revision, *, days: int = 3) -> None:
    """Reports of two nodes over ``days`` days, with two requested strategies per effective one: points
    of one cell and of several."""
    rng = random.Random(7)
    senders = [node("node-a"), node("node-b")]
    now = datetime.now(UTC)
    for day in range(days):
        for sender in senders:
            reports.store_reports(sender, [valid(body(rng)) for _ in range(12)], now - timedelta(days=day))


def computed_series(revision: Revision, bucket: str) -> list[tuple[Any, ...]]:
    """The timeline as ranked from the stored sketches alone: each point's cells merged, then quantiles."""
    grain = Rollup.Grain.HOUR if bucket == "hour" else Rollup.Grain.DAY
    points: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for cell in RevisionRollup.objects.filter(revision=revision, grain=grain).values():
        at = throughput.bucket_start(cell["bucket_start"], bucket)
        points[(at, cell["strategy"], cell["stage_splits"])].append(cell)
    series = []
    for (at, strategy, splits), cells in sorted(points.items()):
        bins = sketch.merged(sketch.from_json(cell["tps_sketch"]) for cell in cells)
        p25, median, p75 = sketch.quantiles(bins, (0.25, 0.5, 0.75))
        series.append((at, strategy, splits, median, sum(c["reports"] for c in cells), p25, p75))
    return series


def series(revision: Revision, bucket: str) -> list[tuple[Any, ...]]:
    points = throughput.revision_throughput(revision.pk, bucket=bucket).series  # type: ignore[union-attr]
    return [(p.bucket, p.strategy, p.topology, p.tps, p.reports, p.p25, p.p75) for p in points]


@pytest.mark.django_db
@pytest.mark.parametrize("bucket", ["hour", "day", "week"])
def test_the_timeline_is_what_its_cells_sketches_give(revision: Revision, bucket: str) -> None:
    """Points of one cell and of several (two requested strategies in one hour, a week's days) are the
    quantiles of their cells' sketches merged."""
    store(revision, days=10)
    got = series(revision, bucket)
    assert got == computed_series(revision, bucket)
    grain = Rollup.Grain.HOUR if bucket == "hour" else Rollup.Grain.DAY
    cells = RevisionRollup.objects.filter(revision=revision, grain=grain).count()
    assert 1 < len(got) < cells  # some points of one cell, some of several
    assert any(point[4] > 1 for point in got)


@pytest.mark.django_db
def test_the_timeline_reads_the_kept_quartiles_not_the_sketches(revision: Revision) -> None:
    """Kept quartiles made wrong by hand show on the timeline (so it reads them), and the check every
    rollup test runs (tests.rollup_checks) catches them; kept again, both agree with the sketches."""
    store(revision, days=1)
    point = _shared_point(revision)
    assert_quartiles_kept()
    RevisionRollup.objects.filter(pk__in=[cell.pk for cell in point]).update(point_tps_median=999.0)

    assert 999.0 in [p[3] for p in series(revision, "hour")]
    with pytest.raises(AssertionError):
        assert_quartiles_kept()

    quartiles.store({quartiles.point_of(_key(point[0]))})
    assert series(revision, "hour") == computed_series(revision, "hour")
    assert_quartiles_kept()


@pytest.mark.django_db
def test_a_report_in_one_cell_of_a_point_moves_the_quartiles_of_all_its_cells(revision: Revision) -> None:
    """Two requested strategies ran as one in the same hour: two cells, one point. Each report adds to one
    cell only, and the other carries the point's new median too."""
    sender, rng, now = node("node-a"), random.Random(11), datetime.now(UTC)
    stages = body(rng)["topology"]["stages"]
    hour = RevisionRollup.objects.filter(revision=revision, grain=Rollup.Grain.HOUR)
    for requested, rate, median in (("auto", 10.0, 10), ("disabled", 30.0, 20), ("auto", 50.0, 30)):
        data = body(rng)
        data["speculative"].update(
            requested_strategy=requested, effective_strategy="disabled", mtp_source="Disabled"
        )
        data["timings"]["predicted_per_second"] = rate
        data["topology"]["stages"] = stages
        reports.store_report(sender, valid(data), now)
        medians = list(hour.values_list("requested_strategy", "point_tps_median"))
        assert medians and all(m == pytest.approx(median, rel=0.01) for _, m in medians), medians
    assert sorted(r for r, _ in medians) == ["auto", "disabled"]
    assert_quartiles_kept()


def _shared_point(revision: Revision) -> list[RevisionRollup]:
    by_point: dict[tuple[Any, ...], list[RevisionRollup]] = defaultdict(list)
    for cell in RevisionRollup.objects.filter(revision=revision, grain=Rollup.Grain.HOUR):
        by_point[(cell.bucket_start, cell.strategy, cell.stage_splits)].append(cell)
    return next(cells for cells in by_point.values() if len(cells) > 1)


def _key(cell: RevisionRollup) -> tuple[Any, ...]:
    return (
        cell.revision_id,
        cell.grain,
        cell.bucket_start,
        cell.stage_splits,
        cell.requested_strategy,
        cell.strategy,
        cell.mtp_used,
    )


@pytest.mark.django_db
def test_a_cell_with_no_decode_rate_keeps_no_quartiles(revision: Revision) -> None:
    data = body(random.Random(3))
    del data["timings"]["predicted_per_second"]
    reports.store_report(node("node-a"), valid(data), datetime.now(UTC))
    rows = RevisionRollup.objects.filter(revision=revision)
    assert rows.exists() and list(rows.values_list(*quartiles.COLUMNS).distinct()) == [(None, None, None)]
    assert_quartiles_kept()


@pytest.mark.django_db
def test_rebuild_rollups_keeps_the_quartiles_of_the_rows_it_rebuilds(revision: Revision) -> None:
    """Rebuilt from the raw reports (in SQL on PostgreSQL, through the upserts on SQLite), every row
    carries its point's quartiles; the control: cleared, the check fails."""
    store(revision)
    RevisionRollup.objects.update(point_tps_p25=None, point_tps_median=None, point_tps_p75=None)
    with pytest.raises(AssertionError):
        assert_quartiles_kept()

    call_command("rebuild_rollups", verbosity=0)

    assert RevisionRollup.objects.filter(point_tps_median__isnull=False).exists()
    assert_quartiles_kept()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_migration_0035_fills_the_quartiles_of_the_stored_rows(revision: Revision) -> None:
    store(revision)
    kept = sorted(RevisionRollup.objects.values_list("pk", *quartiles.COLUMNS))
    migrate([("packages_app", "0034_noderun_releases_from_the_index")])  # no quartile columns

    migrate([("packages_app", "0035_revisionrollup_quartiles")])

    assert sorted(RevisionRollup.objects.values_list("pk", *quartiles.COLUMNS)) == kept
    assert any(row[2] is not None for row in kept)
