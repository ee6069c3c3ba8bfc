"""The window's cells of a node's rows are read as ranges of the rollups' natural key (fleet.figures,
fleet.sql.joined): each (group, window part) pair one read of noderollup_natural_key bounded by the part's
grain and times, never every cell of the group filtered after. On the catalog seed the nodes pages read
18,128 cells for the 755 in the window that way (83 ms; bounded, 4 ms). PostgreSQL's plan, with the
control that shows the planner reading every cell when the subquery is not fenced.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from packages_app.fleet import figures, sql
from packages_app.models import NodeRollup, Package, Revision

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
SINCE = NOW - timedelta(days=7)


def catalog_like_cells() -> list[tuple[int, int, str]]:
    """A node's 40 busiest groups, each with an hour and a day cell for every day of 90 (as a busy node's
    group has), among 3,000 groups of one cell (as most of a catalog's are): the statistics say one cell
    a group. Returns the busy groups' (node, revision, split) keys."""
    package = Package.objects.create(repo_id="meshllm/plan-layers", private=False)
    revisions = Revision.objects.bulk_create(
        Revision(package=package, commit_sha=f"{i:040x}") for i in range(3040)
    )
    cells = [
        NodeRollup(revision=r, node_key=7, grain="day", bucket_start=NOW - timedelta(days=400), reports=1)
        for r in revisions[40:]
    ]
    for r in revisions[:40]:
        for day in range(90):
            at = (NOW - timedelta(days=day)).replace(hour=0)
            cells.append(NodeRollup(revision=r, node_key=7, grain="day", bucket_start=at, reports=2))
            cells.append(NodeRollup(revision=r, node_key=7, grain="hour", bucket_start=at, reports=2))
    NodeRollup.objects.bulk_create(cells)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE packages_app_noderollup")
    return [(7, r.pk, "") for r in revisions[:40]]


def plan_of_window_cells(groups: list[tuple[int, int, str]]) -> str:
    keys = ("node_key", "revision_id", "stage_splits")
    text, params = figures._window_cells_sql(NodeRollup, keys, groups, SINCE, "t.reports", "t.reports")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN ANALYZE " + text, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.fixture
def groups(settings) -> list[tuple[int, int, str]]:
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 400  # the window's first day by hour: two parts
    return catalog_like_cells()


def test_each_group_reads_only_its_cells_in_the_window(groups: list[tuple[int, int, str]]) -> None:
    plan = plan_of_window_cells(groups)
    assert "bucket_start >= w.column2" in plan and "Rows Removed by Join Filter" not in plan, plan


def test_control_unfenced_the_planner_reads_every_cell_of_the_group(
    groups: list[tuple[int, int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql, "FENCE", "")
    plan = plan_of_window_cells(groups)
    assert "Rows Removed by Join Filter" in plan, plan
