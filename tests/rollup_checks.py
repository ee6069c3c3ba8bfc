"""What the rollup tables must agree on, checked by the rollup tests and the seed's."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db.models import QuerySet

from packages_app import sketch
from packages_app.models import PlanRollup, RevisionRollup, Rollup, SplitRollup
from packages_app.rollups import quartiles
from packages_app.rollups import upsert as rollups_upsert


def assert_revision_rollups_add_up_the_every_node_cells() -> None:
    """The RevisionRollup rows are Rollup's every-node cells added up over their topologies: counts exactly,
    float sums within rounding, minimum, maximum, first and last, and the sketches bin by bin."""
    got, expected = revision_rollups(), _revision_rollups_expected()
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        assert got[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}, key
    assert_quartiles_kept()
    assert_plan_rollups_add_up_the_node_total_cells()
    assert_split_rollups_add_up_the_node_total_cells()


def assert_plan_rollups_add_up_the_node_total_cells() -> None:
    """The PlanRollup rows are Rollup's per-node total cells added up over MTP used and topologies, as
    the RevisionRollup rows are the every-node cells added up."""
    _assert_node_total_cells_added_up(plan_rollups(), rollups_upsert.PLAN_KEY_COLUMNS)


def assert_split_rollups_add_up_the_node_total_cells() -> None:
    """The SplitRollup rows are Rollup's per-node total cells added up over strategies and topologies."""
    _assert_node_total_cells_added_up(split_rollups(), rollups_upsert.SPLIT_KEY_COLUMNS)


def _assert_node_total_cells_added_up(
    got: dict[tuple[Any, ...], dict[str, Any]], keys: tuple[str, ...]
) -> None:
    cells = Rollup.objects.filter(grain=Rollup.Grain.TOTAL).exclude(node_key=Rollup.ALL_NODES)
    expected = _added_up(cells, keys)
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        assert got[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}, key


def plan_rollups() -> dict[tuple[Any, ...], dict[str, Any]]:
    return _merged_rows(PlanRollup, rollups_upsert.PLAN_KEY_COLUMNS)


def split_rollups() -> dict[tuple[Any, ...], dict[str, Any]]:
    return _merged_rows(SplitRollup, rollups_upsert.SPLIT_KEY_COLUMNS)


def _merged_rows(
    model: type[PlanRollup | SplitRollup], keys: tuple[str, ...]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = model.objects.values(*keys, *rollups_upsert.FIGURE_COLUMNS)
    return {tuple(row.pop(k) for k in keys): _read_sketches(row) for row in rows}


def assert_quartiles_kept() -> None:
    """Every RevisionRollup row carries its timeline point's quartiles: the sketches of the point's rows
    (its revision, grain, bucket, stage split and strategy) merged, as sketch.quantiles ranks them (none
    when they hold no rate). The figures the timeline reads are the ones it would compute."""
    points: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in RevisionRollup.objects.values_list(*quartiles.POINT, "pk", "tps_sketch", *quartiles.COLUMNS):
        points.setdefault(row[:5], []).append(row[5:])
    for point, rows in points.items():
        merged = sketch.merged(sketch.from_json(stored) for _, stored, *_ in rows)
        expected = sketch.quantiles(merged, sketch.QUARTILES)
        for pk, _, *kept in rows:
            assert kept == expected, (point, pk)


def revision_rollups() -> dict[tuple[Any, ...], dict[str, Any]]:
    return {
        tuple(row.pop(k) for k in rollups_upsert.REVISION_KEY_COLUMNS): _read_sketches(row)
        for row in RevisionRollup.objects.values(
            *rollups_upsert.REVISION_KEY_COLUMNS, *rollups_upsert.FIGURE_COLUMNS
        )
    }


def _revision_rollups_expected() -> dict[tuple[Any, ...], dict[str, Any]]:
    cells = Rollup.objects.filter(node_key=Rollup.ALL_NODES)
    return _added_up(cells, rollups_upsert.REVISION_KEY_COLUMNS)


def _added_up(cells: QuerySet[Rollup], keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The cells added up per ``keys``, in Python."""
    added: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in cells.values(*keys, *rollups_upsert.FIGURE_COLUMNS):
        key = tuple(row.pop(k) for k in keys)
        row = _read_sketches(row)
        old = added.setdefault(key, row)
        if old is row:
            continue
        for column, value in row.items():
            if column.endswith("_sketch"):
                old[column] += value
            elif column == "first_at" or column.endswith("_min"):
                old[column] = min((v for v in (old[column], value) if v is not None), default=None)
            elif column == "last_at" or column.endswith("_max"):
                old[column] = max((v for v in (old[column], value) if v is not None), default=None)
            else:
                old[column] += value
    return added


def _read_sketches(row: dict[str, Any]) -> dict[str, Any]:
    return {k: Counter(sketch.from_json(v)) if k.endswith("_sketch") else v for k, v in row.items()}
