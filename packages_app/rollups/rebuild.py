"""Rollup upkeep: hour cells pruned past their window, and every rollup rebuilt from the raw reports (a few
revisions at a time, in one SQL statement a group on PostgreSQL), while reports keep arriving.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.models import Count, F, OuterRef, Q, Subquery

from packages_app import sketch
from packages_app.models import (
    NodeRollup,
    PlanRollup,
    Report,
    Revision,
    RevisionRollup,
    Rollup,
    Serving,
    SplitRollup,
)
from packages_app.rollups import quartiles
from packages_app.rollups.cells import (
    NON_MTP_CHOICES,
    RATIOS,
    SKETCHED,
    SOURCE_FIELDS,
    SUMMED,
    SUMS,
    PublicRoom,
    cells_of,
    hourly_since,
)
from packages_app.rollups.public_weight import (
    PUBLIC_COLUMNS,
    public_parameters,
    public_reports_per_node_day,
    registered_pairs,
)
from packages_app.rollups.serving import (
    SERVING_COLUMNS,
    SERVING_KEY,
    rebuild_last_served,
    servings_of,
    upsert_serving,
)
from packages_app.rollups.upsert import (
    COLUMNS,
    FIGURE_COLUMNS,
    NODE_ROLLUP_COLUMNS,
    NODE_ROLLUP_KEY,
    PLAN_KEY_COLUMNS,
    REVISION_KEY_COLUMNS,
    SPLIT_KEY_COLUMNS,
    node_rollups_of,
    plan_rollups_of,
    revision_rollups_of,
    split_rollups_of,
    upsert,
    upsert_node_rollups,
    upsert_plan_rollups,
    upsert_revision_rollups,
    upsert_split_rollups,
)

REBUILD_CHUNK = 20_000


def prune_hourly(now: datetime | None = None) -> int:
    """Delete hour cells past their window (their reports are in the day cells); returns how many."""
    since = hourly_since(now)
    NodeRollup.objects.filter(grain=Rollup.Grain.HOUR, bucket_start__lt=since).delete()
    RevisionRollup.objects.filter(grain=Rollup.Grain.HOUR, bucket_start__lt=since).delete()
    deleted, _ = Rollup.objects.filter(grain=Rollup.Grain.HOUR, bucket_start__lt=since).delete()
    return deleted


def rebuild(revision_ids: Sequence[int] | None = None) -> int:
    """Recompute rollups from the raw reports (every revision, or the given ones); returns reports.

    A few revisions at a time, each group in one transaction that first takes the rollup table in
    EXCLUSIVE mode on PostgreSQL: a store that already upserted has committed before the lock is
    granted (its reports are read here), one that has not waits and adds its reports after this
    commit (they were not visible here). So nothing is counted twice or lost while reports keep
    arriving. On PostgreSQL a group is rebuilt by one SQL statement (``_rebuild_in_sql``) and holds
    at most REBUILD_GROUP_REPORTS reports (or one busier revision); on SQLite, one revision.
    """
    if revision_ids is None:
        revision_ids = list(Revision.objects.order_by("pk").values_list("pk", flat=True))
    total = 0
    for group in _rebuild_groups(revision_ids):
        total += _rebuild_group(group)
    return total


REBUILD_GROUP_REPORTS = 200_000


def _rebuild_groups(revision_ids: Sequence[int]) -> list[list[int]]:
    if connections["default"].vendor != "postgresql":
        return [[revision_id] for revision_id in revision_ids]
    counts = dict(
        Report.objects.filter(revision_id__in=revision_ids)
        .order_by()
        .values_list("revision_id")
        .annotate(n=Count("*"))
        .values_list("revision_id", "n")
    )
    groups: list[list[int]] = [[]]
    size = 0
    for revision_id in revision_ids:
        n = counts.get(revision_id, 0)
        if groups[-1] and size + n > REBUILD_GROUP_REPORTS:
            groups.append([])
            size = 0
        groups[-1].append(revision_id)
        size += n
    return [group for group in groups if group]


def outliving_reports(revision_ids: Sequence[int] | None = None) -> list[int]:
    """Revisions whose rollups count reports older than the oldest raw report they still have (the
    retention dropped them, or someone deleted them): rebuilding those would lose figures."""
    reports = Report.objects.filter(revision=OuterRef("revision"))
    oldest = reports.order_by("received_at").values("received_at")
    cells = Rollup.objects.filter(grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES)
    if revision_ids is not None:
        cells = cells.filter(revision_id__in=revision_ids)
    cells = cells.annotate(oldest=Subquery(oldest[:1])).filter(Q(oldest=None) | Q(first_at__lt=F("oldest")))
    return sorted(set(cells.values_list("revision_id", flat=True)))


def _rebuild_group(revision_ids: list[int]) -> int:
    connection = connections["default"]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {Rollup._meta.db_table} IN EXCLUSIVE MODE")
                # A group's sorts fit in memory; compiling the statement (JIT) costs more than it saves.
                cursor.execute("SET LOCAL work_mem = '256MB'")
                cursor.execute("SET LOCAL jit = off")
                _delete_rollups(revision_ids)
                _rebuild_serving_in_sql(cursor, revision_ids)
                rebuild_last_served(revision_ids)
                total = _rebuild_in_sql(cursor, revision_ids)
                _rebuild_node_rollups_in_sql(cursor, revision_ids)
                _rebuild_merged_in_sql(cursor, revision_ids, PlanRollup, PLAN_KEY_COLUMNS, NODE_TOTAL_CELLS)
                _rebuild_merged_in_sql(cursor, revision_ids, SplitRollup, SPLIT_KEY_COLUMNS, NODE_TOTAL_CELLS)
                _rebuild_merged_in_sql(
                    cursor, revision_ids, RevisionRollup, REVISION_KEY_COLUMNS, EVERY_NODE_CELLS
                )
                quartiles.store_revisions(revision_ids)
                return total
        _delete_rollups(revision_ids)
        reports = (
            Report.objects.filter(revision_id__in=revision_ids).order_by("pk").values_list(*SOURCE_FIELDS)
        )
        rows = (
            Report(**dict(zip(SOURCE_FIELDS, row, strict=True)))
            for row in reports.values_list(*SOURCE_FIELDS).iterator(REBUILD_CHUNK)
        )
        room = PublicRoom(registered_pairs(revision_ids), public_reports_per_node_day())
        cells, total = cells_of(rows, hourly_since(), room)
        upsert(cells)
        upsert_node_rollups(node_rollups_of(cells))
        upsert_plan_rollups(plan_rollups_of(cells))
        upsert_split_rollups(split_rollups_of(cells))
        upsert_revision_rollups(revision_rollups_of(cells))
        upsert_serving(servings_of(cells))
        rebuild_last_served(revision_ids)
    return total


def _delete_rollups(revision_ids: list[int]) -> None:
    for model in (Rollup, NodeRollup, PlanRollup, SplitRollup, RevisionRollup, Serving):
        model.objects.filter(revision_id__in=revision_ids).delete()


# The same cells as cells_of + ReportContribution, computed by PostgreSQL from the raw rows in one statement:
# at 10,000,000 reports the Python path takes tens of minutes, this a few. Bins as sketch.bin_of
# (ln and ceil on the same doubles); tests/test_rollups.py checks both paths give the same rows.

_KEY_SQL = (
    "revision_id",
    "grain",
    "node_key",
    "bucket_start",
    "stage_splits",
    "requested_strategy",
    "effective_strategy",
    "mtp_used",
    "topology_id",
)
# Rollup prefix -> the src column the SQL rebuild reads (a Report column, or a derived one src computes).
SQL_METRICS = {m.rollup: m.name for m in SKETCHED}


def _rebuild_serving_in_sql(cursor: Any, revision_ids: list[int]) -> None:
    """The revisions' Serving rows from their reports (as servings_of over cells_of's cells)."""
    non_mtp = ", ".join(f"'{choice}'" for choice in NON_MTP_CHOICES)
    # Only column names and constants are formatted in; the revisions are a parameter.
    cursor.execute(
        f"""
        INSERT INTO {Serving._meta.db_table} ({", ".join(SERVING_COLUMNS)})
        SELECT {", ".join(SERVING_KEY)}, count(*), sum(unused), min(received_at),
               max(received_at), max(CASE WHEN unused = 1 THEN received_at END),
               CASE WHEN min(pair) = max(pair) THEN min(pair) ELSE '' END
        FROM (
            SELECT revision_id, CASE WHEN n.every THEN 0 ELSE node_id END AS node_key, topology_id,
                   stage_splits, received_at,
                   (NOT mtp_used AND requested_strategy NOT IN ({non_mtp}))::int AS unused,
                   jsonb_build_array(requested_strategy, effective_strategy, mtp_used)::text AS pair
            FROM (
                SELECT r.*, {PUBLIC_COLUMNS} FROM {Report._meta.db_table} AS r
                WHERE revision_id = ANY(%(revisions)s)
            ) AS r
            CROSS JOIN (VALUES (false), (true)) AS n (every)
            WHERE NOT n.every OR (r.registered AND r.day_rank <= %(cap)s)
        ) AS r
        GROUP BY {", ".join(SERVING_KEY)}
        """,  # noqa: S608
        public_parameters(revision_ids),
    )


def _rebuild_in_sql(cursor: Any, revision_ids: list[int]) -> int:
    keys = ", ".join(_KEY_SQL)
    coalesced = {total: f"COALESCE({', '.join(names)}, 0)" for total, names in SUMS.items()}
    counters = ", ".join(f"{expr} AS {total}" for total, expr in coalesced.items())
    ratios = ", ".join(
        f"CASE WHEN {coalesced[b]} <> 0 THEN {coalesced[a]}::float8 / {coalesced[b]} END AS {name}"
        for name, (a, b) in RATIOS.items()
    )
    summed = ", ".join(f"sum({total}) AS {total}" for total in SUMS)
    non_mtp = ", ".join(f"'{choice}'" for choice in NON_MTP_CHOICES)
    totals = ", ".join(
        f"count({column}), COALESCE(sum({column}), 0), min({column}), max({column})"
        for column in SQL_METRICS.values()
    )
    bins = " UNION ALL ".join(
        f"SELECT {keys}, '{metric}' AS metric, CASE WHEN {column} < %(min_positive)s THEN %(zero_bin)s"  # noqa: S608
        f" ELSE ceil(ln({column}) / %(log_gamma)s)::int END AS bin, count(*) AS n"
        f" FROM cells WHERE {column} IS NOT NULL GROUP BY {keys}, bin"
        for metric, column in SQL_METRICS.items()
    )
    sketches = ", ".join(
        f"COALESCE(jsonb_object_agg(bin::text, n) FILTER (WHERE metric = '{metric}'), '{{}}'::jsonb)"
        for metric in SQL_METRICS
    )
    metric_columns = ", ".join(
        f"t.{metric}_n, t.{metric}_sum, t.{metric}_min, t.{metric}_max, COALESCE(s.{metric}_sketch, '{{}}')"
        for metric in SQL_METRICS
    )
    total_names = ", ".join(f"{m}_n, {m}_sum, {m}_min, {m}_max" for m in SQL_METRICS)
    sketch_names = ", ".join(f"{m}_sketch" for m in SQL_METRICS)
    stored_metrics = ", ".join(m.name for m in SKETCHED if not m.derived)
    # Only column names and constants are formatted in; the revision and the numbers are parameters.
    sql = f"""
        WITH placed AS (
            SELECT r.*,
                   (observed_at > received_at + %(skew)s
                    OR observed_at < received_at - %(replay)s) AS refused_at,
                   {PUBLIC_COLUMNS}
            FROM {Report._meta.db_table} AS r WHERE revision_id = ANY(%(revisions)s)
        ), src AS (
            SELECT revision_id, node_id, registered, day_rank, received_at, stage_splits, requested_strategy,
                   effective_strategy,
                   mtp_used, topology_id, (source = 'otlp')::int AS from_spans,
                   (NOT mtp_used AND requested_strategy NOT IN ({non_mtp}))::int AS unused,
                   {counters},
                   {stored_metrics},
                   {ratios},
                   (NOT refused_at AND observed_at < received_at - %(skew)s)::int AS moved,
                   refused_at::int AS refused,
                   CASE WHEN refused_at THEN received_at ELSE observed_at END AS plotted,
                   date_bin(
                       '1 hour', CASE WHEN refused_at THEN received_at ELSE observed_at END, %(epoch)s
                   ) AS hour
            FROM placed
        ), cells AS MATERIALIZED (
            SELECT src.*, g.grain, g.bucket_start, n.node_key FROM src
            CROSS JOIN LATERAL (VALUES
                ('day', date_bin('1 day', plotted, %(epoch)s)),
                ('total', %(epoch)s),
                ('hour', CASE WHEN hour >= %(hourly_from)s THEN hour END)
            ) AS g (grain, bucket_start)
            CROSS JOIN LATERAL (VALUES (node_id), (0)) AS n (node_key)
            WHERE g.bucket_start IS NOT NULL AND (n.node_key <> 0 OR (registered AND day_rank <= %(cap)s))
        ), totals AS (
            SELECT {keys}, count(*) AS reports, sum(from_spans) AS from_spans, sum(unused) AS unused,
                   {summed}, sum(moved) AS moved, sum(refused) AS refused,
                   min(received_at) AS first_at, max(received_at) AS last_at,
                   {totals}
            FROM cells GROUP BY {keys}
        ), binned AS ({bins}
        ), sketches AS (
            SELECT {keys}, {sketches} FROM binned GROUP BY {keys}
        )
        INSERT INTO {Rollup._meta.db_table} ({", ".join(COLUMNS)})
        SELECT {", ".join(f"t.{k}" for k in _KEY_SQL)}, {", ".join(f"t.{c}" for c in SUMMED)},
               t.first_at, t.last_at, {metric_columns}
        FROM totals AS t ({keys}, {", ".join(SUMMED)}, first_at, last_at, {total_names})
        LEFT JOIN sketches AS s ({keys}, {sketch_names}) USING ({keys})
    """  # noqa: S608
    cursor.execute(
        sql,
        {
            **public_parameters(revision_ids),
            "hourly_from": hourly_since(),
            "min_positive": sketch.MIN_POSITIVE,
            "zero_bin": sketch.ZERO_BIN,
            "log_gamma": sketch.LOG_GAMMA,
        },
    )
    return int(Report.objects.filter(revision_id__in=revision_ids).count())


def _rebuild_node_rollups_in_sql(cursor: Any, revision_ids: list[int]) -> None:
    """The revisions' NodeRollup rows from their rebuilt Rollup cells (as node_rollups_of does)."""
    keys = ", ".join(NODE_ROLLUP_KEY)
    # Only column names and constants are formatted in; the revisions are a parameter.
    cursor.execute(
        f"""
        WITH cells AS (
            SELECT {keys}, reports, tps_sketch,
                   jsonb_build_array(requested_strategy, strategy, mtp_used)::text AS pair
            FROM {Rollup._meta.db_table}
            WHERE revision_id = ANY(%(revisions)s) AND node_key <> 0 AND grain <> 'total'
        ), pairs AS (
            SELECT {keys}, sum(n) AS reports, jsonb_object_agg(pair, n) AS strategies
            FROM (SELECT {keys}, pair, sum(reports) AS n FROM cells GROUP BY {keys}, pair) AS p
            GROUP BY {keys}
        ), bins AS (
            SELECT {keys}, jsonb_object_agg(bin, n) AS tps_sketch
            FROM (
                SELECT {keys}, b.key AS bin, sum(b.value::bigint) AS n
                FROM cells CROSS JOIN LATERAL jsonb_each_text(cells.tps_sketch) AS b
                GROUP BY {keys}, b.key
            ) AS s
            GROUP BY {keys}
        )
        INSERT INTO {NodeRollup._meta.db_table} ({", ".join(NODE_ROLLUP_COLUMNS)})
        SELECT {keys}, pairs.reports, COALESCE(bins.tps_sketch, '{{}}'::jsonb), pairs.strategies
        FROM pairs LEFT JOIN bins USING ({keys})
        """,  # noqa: S608
        {"revisions": revision_ids},
    )


# The rebuilt Rollup cells each merged table adds up (rollups.upsert.revision_rollups_of; plan_rollups_of
# and split_rollups_of).
EVERY_NODE_CELLS = f"node_key = {Rollup.ALL_NODES}"
NODE_TOTAL_CELLS = f"grain = '{Rollup.Grain.TOTAL}' AND node_key <> {Rollup.ALL_NODES}"


def _rebuild_merged_in_sql(
    cursor: Any,
    revision_ids: list[int],
    model: type[RevisionRollup | PlanRollup | SplitRollup],
    key: tuple[str, ...],
    cells: str,
) -> None:
    """The revisions' RevisionRollup (or PlanRollup, or SplitRollup) rows from their rebuilt Rollup ``cells``
    (as revision_rollups_of, plan_rollups_of and split_rollups_of do): counts and sums add, minimum and
    maximum compare, sketches add bin by bin."""
    keys = ", ".join(key)
    figures = [c for c in FIGURE_COLUMNS if not c.endswith("_sketch")]
    totals = [f"{_added(c)}({c}) AS {c}" for c in figures]
    binned = " UNION ALL ".join(
        f"SELECT {keys}, '{m}' AS metric, b.key AS bin, sum(b.value::bigint) AS n"  # noqa: S608
        f" FROM cells, jsonb_each_text(cells.{m}_sketch) AS b GROUP BY {keys}, b.key"
        for m in SQL_METRICS
    )
    sketches = ", ".join(
        f"jsonb_object_agg(bin, n) FILTER (WHERE metric = '{m}') AS {m}_sketch" for m in SQL_METRICS
    )
    sketched = ", ".join(f"{m}_sketch" for m in SQL_METRICS)
    # A cell without a value of any sketched metric has no binned rows: its sketches are empty.
    merged = ", ".join(f"COALESCE({m}_sketch, '{{}}'::jsonb)" for m in SQL_METRICS)
    # Only column names and constants are formatted in; the revisions are a parameter.
    cursor.execute(
        f"""
        WITH cells AS (
            SELECT * FROM {Rollup._meta.db_table}
            WHERE revision_id = ANY(%(revisions)s) AND {cells}
        ), totals AS (
            SELECT {keys}, {", ".join(totals)} FROM cells GROUP BY {keys}
        ), binned AS ({binned}
        ), sketches AS (
            SELECT {keys}, {sketches} FROM binned GROUP BY {keys}
        )
        INSERT INTO {model._meta.db_table} ({keys}, {", ".join(figures)}, {sketched})
        SELECT {keys}, {", ".join(figures)}, {merged}
        FROM totals LEFT JOIN sketches USING ({keys})
        """,  # noqa: S608
        {"revisions": revision_ids},
    )


def _added(column: str) -> str:
    """How two cells' ``column`` add up: counts and sums add, the first and the lowest the minimum."""
    if column == "first_at" or column.endswith("_min"):
        return "min"
    return "max" if column == "last_at" or column.endswith("_max") else "sum"
