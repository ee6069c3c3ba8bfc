"""The upserts that add cells to the stored rollups (models.Rollup, every node's models.RevisionRollup, each
node's models.NodeRollup, models.PlanRollup and models.SplitRollup), in SQL on PostgreSQL and SQLite alike:
counts and sums add, minimum and maximum compare, sketches add bin by bin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.db import connections

from packages_app import sketch
from packages_app.models import (
    PLAN_ROLLUP_KEY,
    REVISION_ROLLUP_KEY,
    ROLLUP_KEY,
    SPLIT_ROLLUP_KEY,
    NodeRollup,
    PlanRollup,
    RevisionRollup,
    Rollup,
    SplitRollup,
)
from packages_app.rollups import quartiles
from packages_app.rollups.cells import METRICS, SUMMED, Cell, Key

UPSERT_ROWS = 200


def key_columns(key: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{name}_id" if name == "revision" else name for name in key)


KEY_COLUMNS = key_columns(ROLLUP_KEY)
REVISION_KEY_COLUMNS = key_columns(REVISION_ROLLUP_KEY)
PLAN_KEY_COLUMNS = key_columns(PLAN_ROLLUP_KEY)
SPLIT_KEY_COLUMNS = key_columns(SPLIT_ROLLUP_KEY)
METRIC_COLUMNS = tuple(f"{m}_{part}" for m in METRICS for part in ("n", "sum", "min", "max", "sketch"))
FIGURE_COLUMNS = (*SUMMED, "first_at", "last_at", *METRIC_COLUMNS)
COLUMNS = (*KEY_COLUMNS, *FIGURE_COLUMNS)
# revision, grain, bucket start, stage splits, requested strategy, strategy, MTP used (REVISION_ROLLUP_KEY)
RevisionKey = tuple[int, str, datetime, str, str, str, bool]
# revision, node, stage splits, requested strategy, strategy (PLAN_ROLLUP_KEY)
PlanKey = tuple[int, int, str, str, str]
# revision, node, stage splits, MTP used (SPLIT_ROLLUP_KEY)
SplitKey = tuple[int, int, str, bool]


def upsert(cells: dict[Key, Cell], *, using: str = "default") -> None:
    """Add the cells to the stored rollups: one INSERT ... ON CONFLICT DO UPDATE per UPSERT_ROWS."""
    _upsert_cells(cells, Rollup._meta.db_table, KEY_COLUMNS, using)


def revision_rollups_of(cells: dict[Key, Cell]) -> dict[RevisionKey, Cell]:
    """The RevisionRollup rows the cells add to: their every-node cells, added up over topologies."""
    merged: dict[RevisionKey, Cell] = {}
    for key, cell in cells.items():
        revision, grain, node, start, splits, requested, strategy, mtp_used, _topology = key
        if node == Rollup.ALL_NODES:
            _add(merged, (revision, grain, start, splits, requested, strategy, mtp_used), cell)
    return merged


def plan_rollups_of(cells: dict[Key, Cell]) -> dict[PlanKey, Cell]:
    """The PlanRollup rows the cells add to: their per-node total cells, added up over MTP used and
    topologies."""
    return _node_totals_by(cells, PLAN_ROLLUP_KEY)


def split_rollups_of(cells: dict[Key, Cell]) -> dict[SplitKey, Cell]:
    """The SplitRollup rows the cells add to: their per-node total cells, added up over strategies and
    topologies."""
    return _node_totals_by(cells, SPLIT_ROLLUP_KEY)


def _node_totals_by(cells: dict[Key, Cell], key: tuple[str, ...]) -> dict[tuple[Any, ...], Cell]:
    """The per-node total cells added up per ``key``, a model's key of ROLLUP_KEY's names."""
    at = [ROLLUP_KEY.index(name) for name in key]
    merged: dict[tuple[Any, ...], Cell] = {}
    for cell_key, cell in cells.items():
        _revision, grain, node, *_ = cell_key
        if node != Rollup.ALL_NODES and grain == Rollup.Grain.TOTAL:
            _add(merged, tuple(cell_key[i] for i in at), cell)
    return merged


MergedKey = TypeVar("MergedKey", RevisionKey, tuple[Any, ...])


def _add(merged: dict[MergedKey, Cell], key: MergedKey, cell: Cell) -> None:
    found = merged.setdefault(key, Cell(first_at=cell.first_at, last_at=cell.last_at))
    found.merge(cell)


def upsert_plan_rollups(cells: dict[PlanKey, Cell], *, using: str = "default") -> None:
    """Add to the stored PlanRollup rows, in key order (after ``upsert`` and ``upsert_node_rollups``,
    before ``upsert_revision_rollups``, as every writer: no deadlock)."""
    _upsert_cells(cells, PlanRollup._meta.db_table, PLAN_KEY_COLUMNS, using)


def upsert_split_rollups(cells: dict[SplitKey, Cell], *, using: str = "default") -> None:
    """Add to the stored SplitRollup rows, in key order (after ``upsert_plan_rollups``, before
    ``upsert_revision_rollups``, as every writer: no deadlock)."""
    _upsert_cells(cells, SplitRollup._meta.db_table, SPLIT_KEY_COLUMNS, using)


def upsert_revision_rollups(cells: dict[RevisionKey, Cell], *, using: str = "default") -> None:
    """Add to the stored RevisionRollup rows, in key order (after ``upsert`` and ``upsert_node_rollups``,
    as every writer: no deadlock), and keep the quartiles of the timeline points they are in, under
    those points' locks (rollups.quartiles)."""
    points = {quartiles.point_of(key) for key in cells}
    quartiles.lock(points, using=using)
    _upsert_cells(cells, RevisionRollup._meta.db_table, REVISION_KEY_COLUMNS, using)
    quartiles.store(points, using=using)


def _upsert_cells(
    cells: Mapping[tuple[Any, ...], Cell], table: str, keys: tuple[str, ...], using: str
) -> None:
    connection = connections[using]
    statement = _upsert_sql(connection.vendor, table, keys)
    ordered = sorted(cells.items(), key=lambda item: item[0])
    execute(connection, statement, [row_values(connection, key, cell) for key, cell in ordered])


@dataclass(frozen=True)
class Statement:
    sql: str  # with {rows} where the VALUES rows go
    row: str  # one row's placeholders


def execute(connection: Any, statement: Statement, rows: list[list[Any]]) -> None:
    """Run an upsert UPSERT_ROWS rows at a time. Callers pass the rows sorted by key, so that two
    transactions touching the same rows lock them in the same order: no deadlock."""
    with connection.cursor() as cursor:
        for start in range(0, len(rows), UPSERT_ROWS):
            chunk = rows[start : start + UPSERT_ROWS]
            placeholders = ", ".join([statement.row] * len(chunk))
            cursor.execute(
                statement.sql.replace("{rows}", placeholders, 1), [v for row in chunk for v in row]
            )


def _upsert_sql(vendor: str, table: str, keys: tuple[str, ...]) -> Statement:
    postgres = vendor == "postgresql"
    cast = "::jsonb" if postgres else ""
    columns = (*keys, *FIGURE_COLUMNS)
    row = "(" + ", ".join(f"%s{cast}" if c.endswith("_sketch") else "%s" for c in columns) + ")"
    updates = [f"{c} = {table}.{c} + excluded.{c}" for c in (*SUMMED, *_metric_parts("n", "sum"))]
    updates += [f"{c} = {least(postgres, table, c)}" for c in ("first_at", *_metric_parts("min"))]
    updates += [f"{c} = {greatest(postgres, table, c)}" for c in ("last_at", *_metric_parts("max"))]
    updates += [f"{c} = {_merge_bins(postgres, table, c)}" for c in _metric_parts("sketch")]
    # Only column names and constants are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, row)


def _metric_parts(*parts: str) -> list[str]:
    return [f"{m}_{part}" for m in METRICS for part in parts]


def least(postgres: bool, table: str, column: str) -> str:
    # LEAST skips NULLs; SQLite's two-argument MIN returns NULL if either is NULL.
    if postgres:
        return f"LEAST({table}.{column}, excluded.{column})"
    return f"COALESCE(MIN({table}.{column}, excluded.{column}), {table}.{column}, excluded.{column})"


def greatest(postgres: bool, table: str, column: str) -> str:
    if postgres:
        return f"GREATEST({table}.{column}, excluded.{column})"
    return f"COALESCE(MAX({table}.{column}, excluded.{column}), {table}.{column}, excluded.{column})"


def _merge_bins(postgres: bool, table: str, column: str) -> str:
    """Bin-by-bin sum of two sketches stored as JSON objects ``{"bin": count}`` (names only, no values)."""
    if postgres:
        return (
            "(SELECT COALESCE(jsonb_object_agg(b.key, b.n), '{}'::jsonb) FROM "  # noqa: S608
            "(SELECT key, SUM(value::bigint) AS n FROM "
            f"(SELECT * FROM jsonb_each_text({table}.{column}) UNION ALL "
            f"SELECT * FROM jsonb_each_text(excluded.{column})) AS e GROUP BY key) AS b)"
        )
    return (
        "(SELECT COALESCE(json_group_object(b.key, b.n), '{}') FROM "  # noqa: S608
        "(SELECT key, SUM(value) AS n FROM "
        f"(SELECT key, value FROM json_each({table}.{column}) UNION ALL "
        f"SELECT key, value FROM json_each(excluded.{column})) GROUP BY key) AS b)"
    )


def row_values(connection: Any, key: tuple[Any, ...], cell: Cell) -> list[Any]:
    """A cell's row: its key (a Rollup or a RevisionRollup key, its bucket start the one time), then its
    figures."""
    adapt = connection.ops.adapt_datetimefield_value
    values: list[Any] = [adapt(v) if isinstance(v, datetime) else v for v in key]
    values += [getattr(cell, name) for name in SUMMED]
    values += [adapt(cell.first_at), adapt(cell.last_at)]
    for name in METRICS:
        metric = cell.metrics[name]
        values += [metric.n, metric.total, metric.low, metric.high, _json(metric.bins)]
    return values


def _json(bins: sketch.Sketch) -> str:
    return "{" + ", ".join(f'"{index}": {count}' for index, count in sorted(bins.items())) + "}"


NodeKey = tuple[int, str, int, datetime, str]  # revision, grain, node, bucket start, stage splits
NODE_ROLLUP_KEY = ("revision_id", "grain", "node_key", "bucket_start", "stage_splits")
NODE_ROLLUP_COLUMNS = (*NODE_ROLLUP_KEY, "reports", "tps_sketch", "strategies")


@dataclass
class NodeRollupDelta:
    """What one batch adds to one NodeRollup row."""

    reports: int = 0
    bins: sketch.Sketch = field(default_factory=dict)
    strategies: dict[str, int] = field(default_factory=dict)


def strategy_key(requested: str, effective: str, mtp_used: bool) -> str:
    """The key of a strategy in NodeRollup.strategies (as PostgreSQL's jsonb_build_array(...)::text)."""
    return json.dumps([requested, effective, bool(mtp_used)], ensure_ascii=False)


def node_rollups_of(cells: dict[Key, Cell]) -> dict[NodeKey, NodeRollupDelta]:
    """The NodeRollup rows the cells add to: their hour and day cells of one node, summed over
    strategies and topologies."""
    merged: dict[NodeKey, NodeRollupDelta] = {}
    for key, cell in cells.items():
        revision, grain, node, start, splits, requested, strategy, mtp_used, _topology = key
        if grain == Rollup.Grain.TOTAL or node == Rollup.ALL_NODES:
            continue
        found = merged.setdefault((revision, grain, node, start, splits), NodeRollupDelta())
        found.reports += cell.reports
        for index, count in cell.metrics["tps"].bins.items():
            found.bins[index] = found.bins.get(index, 0) + count
        pair = strategy_key(requested, strategy, mtp_used)
        found.strategies[pair] = found.strategies.get(pair, 0) + cell.reports
    return merged


def upsert_node_rollups(cells: dict[NodeKey, NodeRollupDelta], *, using: str = "default") -> None:
    """Add to the stored NodeRollup rows, in key order (after ``upsert``, as every writer: no deadlock)."""
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        [revision, grain, node, adapt(start), splits, c.reports, _json(c.bins), json.dumps(c.strategies)]
        for (revision, grain, node, start, splits), c in sorted(cells.items(), key=lambda item: item[0])
    ]
    execute(connection, _node_rollup_upsert_sql(connection.vendor), rows)


def _node_rollup_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", NodeRollup._meta.db_table
    cast = "::jsonb" if postgres else ""
    updates = [f"reports = {table}.reports + excluded.reports"]
    updates += [f"{c} = {_merge_bins(postgres, table, c)}" for c in ("tps_sketch", "strategies")]
    # Only column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(NODE_ROLLUP_COLUMNS)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(NODE_ROLLUP_KEY)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, f"(%s, %s, %s, %s, %s, %s, %s{cast}, %s{cast})")
