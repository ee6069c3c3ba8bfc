"""Who served what, kept beside the rollups: models.Serving (per revision x node x topology x split) and
models.LastServed (per revision, the newest of its every-node Serving rows), added to from a batch's cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections
from django.db.models import F, Max

from packages_app.models import LastServed, Revision, Rollup, Serving
from packages_app.rollups.cells import Cell, Key, later
from packages_app.rollups.upsert import Statement, execute, greatest, least, strategy_key

ServingKey = tuple[int, int, str, str]  # revision, node_key, topology, stage splits
SERVING_KEY = ("revision_id", "node_key", "topology_id", "stage_splits")
SERVING_COLUMNS = (
    *SERVING_KEY,
    "reports",
    "unused",
    "first_at",
    "last_at",
    "last_unused_at",
    "sole_strategy",
)


def servings_of(cells: dict[Key, Cell]) -> dict[ServingKey, Cell]:
    """The Serving rows the cells add to: their total-grain cells (each report is in exactly one per
    node key) summed per revision x node x topology x split, with the strategy they all ran (or "")."""
    servings: dict[ServingKey, Cell] = {}
    for key, cell in cells.items():
        revision, grain, node, _start, splits, requested, strategy, mtp_used, topology = key
        if grain != Rollup.Grain.TOTAL:
            continue
        serving_key = (revision, node, topology, splits)
        serving = servings.get(serving_key)
        ran = strategy_key(requested, strategy, mtp_used)
        if serving is None:
            serving = servings[serving_key] = Cell(first_at=cell.first_at, last_at=cell.last_at)
            serving.sole_strategy = ran
        elif serving.sole_strategy != ran:
            serving.sole_strategy = ""
        serving.reports += cell.reports
        serving.unused += cell.unused
        serving.first_at = min(serving.first_at, cell.first_at)
        serving.last_at = max(serving.last_at, cell.last_at)
        serving.last_unused_at = later(serving.last_unused_at, cell.last_unused_at)
    return servings


def upsert_serving(servings: dict[ServingKey, Cell], *, using: str = "default") -> None:
    """Add to the stored Serving rows, in key order (as ``upsert``, after it: no deadlock)."""
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        [
            *key,
            c.reports,
            c.unused,
            adapt(c.first_at),
            adapt(c.last_at),
            adapt(c.last_unused_at),
            c.sole_strategy or "",
        ]
        for key, c in sorted(servings.items(), key=lambda item: item[0])
    ]
    execute(connection, _serving_upsert_sql(connection.vendor), rows)


def _serving_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", Serving._meta.db_table
    updates = [f"{c} = {table}.{c} + excluded.{c}" for c in ("reports", "unused")]
    updates.append(f"first_at = {least(postgres, table, 'first_at')}")
    updates += [f"{c} = {greatest(postgres, table, c)}" for c in ("last_at", "last_unused_at")]
    # One strategy stays the row's only while every batch adds that one.
    updates.append(
        f"sole_strategy = CASE WHEN {table}.sole_strategy = excluded.sole_strategy"
        f" THEN {table}.sole_strategy ELSE '' END"
    )
    # Only column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(SERVING_COLUMNS)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(SERVING_KEY)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, "(" + ", ".join(["%s"] * len(SERVING_COLUMNS)) + ")")


def upsert_last_served(servings: dict[ServingKey, Cell], *, using: str = "default") -> None:
    """Move each revision's LastServed row forward to its every-node Serving rows' newest times (after
    ``upsert_serving``, in revision order)."""
    newest: dict[int, Cell] = {}
    for (revision, node, _topology, _splits), cell in servings.items():
        if node != Rollup.ALL_NODES:
            continue
        found = newest.setdefault(revision, Cell(first_at=cell.first_at, last_at=cell.last_at))
        found.last_at = max(found.last_at, cell.last_at)
        found.last_unused_at = later(found.last_unused_at, cell.last_unused_at)
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [[r, r, adapt(c.last_at), adapt(c.last_unused_at)] for r, c in sorted(newest.items())]
    execute(connection, _last_served_upsert_sql(connection.vendor), rows)


def _last_served_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", LastServed._meta.db_table
    updates = ", ".join(f"{c} = {greatest(postgres, table, c)}" for c in ("last_at", "last_unused_at"))
    # Only table and column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} (revision_id, package_id, last_at, last_unused_at) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT (revision_id) DO UPDATE SET {updates}"
    )
    package = f"(SELECT package_id FROM {Revision._meta.db_table} WHERE id = %s)"  # noqa: S608
    return Statement(sql, f"(%s, {package}, %s, %s)")


def rebuild_last_served(revision_ids: Sequence[int]) -> None:
    """The revisions' LastServed rows from their every-node Serving rows (after those are rebuilt)."""
    LastServed.objects.filter(revision_id__in=revision_ids).delete()
    newest = (
        Serving.objects.filter(revision_id__in=revision_ids, node_key=Rollup.ALL_NODES)
        .values("revision_id", package_id=F("revision__package_id"))
        .annotate(last_at=Max("last_at"), last_unused_at=Max("last_unused_at"))
        .order_by()
    )
    LastServed.objects.bulk_create(LastServed(**row) for row in newest)
