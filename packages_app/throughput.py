"""Read-side selectors over node reports: throughput series, MTP use and the unused-MTP alert.

Everything is aggregated in SQL (time buckets, counts, sums, medians); Python only renames, adds up
and divides the few hundred aggregated rows. ``tps`` is the median decode rate on PostgreSQL
(percentile_cont); SQLite has no percentile function, so there it is the mean.

A revision's figures take two passes over its reports, however many there are: one grouped by
(time bucket, strategy, topology), which gives the series and every count and sum, and one
ungrouped, for the medians of wider groups (MTP on and off, each strategy), since medians do not
add up. On PostgreSQL both read the ``report_revision_tps`` index alone, in decode-rate order, so
each median's sort finds its input already sorted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Aggregate,
    Count,
    Exists,
    F,
    FloatField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Coalesce, Trunc
from django.db.models.sql.compiler import SQLCompiler

from packages_app.models import Report, Revision

BUCKETS = ("minute", "hour", "day", "week", "month")
RECENT = 20
# A report "shows MTP unused" unless the operator chose a strategy without MTP: then the package
# is not at fault, so such reports never raise the alert.
NON_MTP_CHOICES = ("disabled", "ngram-cache", "ngram-suffix")
MTP_UNUSED = Q(mtp_used=False) & ~Q(requested_strategy__in=NON_MTP_CHOICES)
MTP_ON = Q(mtp_used=True)
MTP_OFF = Q(mtp_used=False)
# Per-strategy medians are FILTERed aggregates of the ungrouped pass, one per strategy; past this
# many strategies (nodes name them freely) one grouped query computes them instead.
STRATEGY_FILTERS = 16
BUCKET_WIDTHS = {
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}
A_MONDAY = datetime(2000, 1, 3, tzinfo=UTC)  # date_trunc's weeks start on Mondays


class Median(Aggregate):
    """The 50th percentile on PostgreSQL; the mean elsewhere (SQLite has no percentile)."""

    function = "AVG"
    name = "Median"
    output_field = FloatField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # Set on a copy, not passed as an argument: Aggregate.as_sql also passes `template` when
        # it wraps a FILTER clause, and the two would collide.
        percentile = self.copy()
        percentile.template = "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
        sql, params = percentile.as_sql(compiler, connection, **extra)
        return sql, tuple(params)


class GroupMedian(Median):
    """Median for a GROUP BY that PostgreSQL should hash (see ``_grouped_by_hashing``).

    An ordered-set aggregate forces sort-based grouping, i.e. sorting every report by the group
    key. ARRAY_AGG hashes; the percentile of each group's array is then taken in a subquery, where
    the ARRAY_AGG still belongs to the outer query (its arguments are all outer columns).
    """

    name = "GroupMedian"

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        values = self.copy()
        values.function = "ARRAY_AGG"
        sql, params = values.as_sql(compiler, connection, **extra)
        # Only wraps SQL that Django compiled; the values stay parameters.
        median = f"(SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY rate) FROM UNNEST({sql}) AS rate)"  # noqa: S608
        return median, tuple(params)


class BucketStart(Trunc):
    """``Trunc``; on PostgreSQL, date_bin (14+, as Django 5.2 requires) for fixed-width buckets in
    UTC: the same bucket starts for a small part of date_trunc's cost over ``AT TIME ZONE``."""

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        width = BUCKET_WIDTHS.get(str(self.kind))
        if width is None or self.get_tzname() != "UTC":
            sql, params = self.as_sql(compiler, connection)
            return sql, tuple(params)
        sql, params = compiler.compile(self.lhs)
        return f"DATE_BIN(%s, {sql}, %s)", (width, *params, A_MONDAY)


def _speculative_sums(condition: Q | None = None) -> dict[str, Sum]:
    # llama-server style nodes send draft_n / draft_n_accepted; mesh-llm sends speculative_*.
    return {
        "accepted": Sum(Coalesce("speculative_accepted_n", "draft_n_accepted"), filter=condition),
        "proposed": Sum(Coalesce("speculative_proposed_n", "draft_n"), filter=condition),
        "windows": Sum("speculative_windows", filter=condition),
    }


def _rates(row: Mapping[str, Any]) -> dict[str, float | None]:
    """Acceptance rate = accepted / proposed; mean accepted length = 1 + accepted / drafts."""
    accepted, proposed, windows = row.get("accepted") or 0, row.get("proposed"), row.get("windows")
    return {
        "acceptance_rate": accepted / proposed if proposed else None,
        "mean_accepted_length": 1 + accepted / windows if windows else None,
    }


def revision_throughput(revision_id: int, *, bucket: str = "hour") -> dict[str, Any]:
    """Everything the package page charts for one revision (see the keys below)."""
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    reports = Report.objects.filter(revision_id=revision_id)
    mtp_detected = Revision.objects.filter(pk=revision_id, mtp_detected=True).exists()
    cells = _cells(reports, bucket)
    strategies = _add_up_by_strategy(cells)
    total = _add_up(cells)
    wide = _wide_medians(reports, list(strategies), alert=mtp_detected) if cells else NO_MEDIANS
    return {
        "series": _series(cells),
        "by_strategy": _by_strategy(strategies, wide["strategy_tps"]),
        "mtp_on": {"reports": wide["on_reports"], "tps": wide["on_tps"]},
        "mtp_off": {"reports": total["reports"] - wide["on_reports"], "tps": wide["off_tps"]},
        **_rates(total),
        "stage_splits": sorted({cell["stage_splits"] for cell in cells} - {""}),
        "recent": _recent(reports),
        "plans": strategy_plans(reports),
        "alert": _alert(wide) if mtp_detected else None,
    }


def _cells(reports: QuerySet[Report], bucket: str) -> list[dict[str, Any]]:
    """Per (time bucket, strategy, topology): reports, median tok/s and the speculative counters."""
    rows = (
        reports.annotate(bucket=BucketStart("received_at", bucket))
        .values("bucket", "effective_strategy", "stage_splits")
        .annotate(tps=GroupMedian("predicted_per_second"), reports=Count("*"), **_speculative_sums())
        .order_by()
    )
    # Sorted here, not by SQL: an ORDER BY would let PostgreSQL group by sorting after all.
    return sorted(_grouped_by_hashing(rows), key=itemgetter("bucket", "effective_strategy", "stage_splits"))


def _grouped_by_hashing(rows: QuerySet[Any, Any]) -> list[dict[str, Any]]:
    """The rows of a GROUP BY, which PostgreSQL is told to group by hashing.

    It has no statistics on a time bucket, so it expects one group per distinct received_at (10^5
    for a busy revision) and would sort every report by the group key first; there are a few
    hundred groups, which one hash table takes in a single pass. JIT goes off too: a plan that
    still sorts costs over 10^10 with sorting "disabled", and compiling it would take ~100 ms. SET
    LOCAL ends with the transaction; the old values are put back in case a caller's goes on.
    """
    database = connections[rows.db]
    if database.vendor != "postgresql":
        return list(rows)
    with transaction.atomic(using=rows.db), database.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
        previous = cursor.fetchone()
        cursor.execute("SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)")
        result = list(rows)
        cursor.execute("SELECT set_config('enable_sort', %s, true), set_config('jit', %s, true)", previous)
    return result


def _series(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "bucket": cell["bucket"],
            "strategy": cell["effective_strategy"],
            "topology": cell["stage_splits"],
            "tps": cell["tps"],
            "reports": cell["reports"],
        }
        for cell in cells
    ]


ADDED_UP = ("reports", "accepted", "proposed", "windows")


def _add_up(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Counts and sums over several cells (a SQL SUM of nothing is NULL: counted as 0)."""
    return {key: sum(row[key] or 0 for row in rows) for key in ADDED_UP}


def _add_up_by_strategy(cells: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault(cell["effective_strategy"], []).append(cell)
    return {strategy: _add_up(groups[strategy]) for strategy in sorted(groups)}


def _by_strategy(
    strategies: dict[str, dict[str, int]], medians: Mapping[str, float | None]
) -> list[dict[str, Any]]:
    return [
        {"strategy": strategy, "reports": sums["reports"], "tps": medians.get(strategy), **_rates(sums)}
        for strategy, sums in strategies.items()
    ]


NO_MEDIANS: dict[str, Any] = {"on_reports": 0, "on_tps": None, "off_tps": None, "strategy_tps": {}}


def _wide_medians(reports: QuerySet[Report], strategies: list[str], *, alert: bool) -> dict[str, Any]:
    """Medians over MTP on, MTP off and each strategy (plus the alert's counts) in one pass."""
    filtered = len(strategies) <= STRATEGY_FILTERS
    aggregates: dict[str, Aggregate] = {
        # received_at, never NULL, rather than id: read from the index (Count("*") takes no filter).
        "on_reports": Count("received_at", filter=MTP_ON),
        "on_tps": Median("predicted_per_second", filter=MTP_ON),
        "off_tps": Median("predicted_per_second", filter=MTP_OFF),
    }
    if filtered:
        for index, strategy in enumerate(strategies):
            aggregates[f"strategy_{index}"] = Median(
                "predicted_per_second", filter=Q(effective_strategy=strategy)
            )
    if alert:
        aggregates["unused_reports"] = Count("received_at", filter=MTP_UNUSED)
        aggregates["unused_nodes"] = Count("node", filter=MTP_UNUSED, distinct=True)
    row = reports.aggregate(**aggregates)
    if filtered:
        row["strategy_tps"] = {s: row.pop(f"strategy_{i}") for i, s in enumerate(strategies)}
    else:
        row["strategy_tps"] = _strategy_medians(reports)
    return row


def _strategy_medians(reports: QuerySet[Report]) -> dict[str, float | None]:
    rows = reports.values("effective_strategy").annotate(tps=GroupMedian("predicted_per_second"))
    return {row["effective_strategy"]: row["tps"] for row in _grouped_by_hashing(rows.order_by())}


def _alert(wide: dict[str, Any]) -> dict[str, Any] | None:
    reports, nodes = wide.get("unused_reports"), wide.get("unused_nodes")
    if not reports:
        return None
    message = (
        f"MTP weights present but never used in {reports} report{'s' if reports != 1 else ''} "
        f"from {nodes} node{'s' if nodes != 1 else ''}"
    )
    return {"message": message, "reports": reports, "nodes": nodes}


RECENT_FIELDS = (
    "received_at",
    "observed_at",
    "clock_skew_flagged",
    "node_name",
    "requested_strategy",
    "effective_strategy",
    "mtp_source",
    "mtp_used",
    "stage_splits",
    "predicted_per_second",
    "prompt_per_second",
    "predicted_n",
    "timings_flagged",
    "source",
    "run_id",
)


def _recent(reports: QuerySet[Report]) -> list[dict[str, Any]]:
    rows = reports.order_by("-received_at", "-id").annotate(node_name=F("node__name"))
    return [dict(row) for row in rows.values(*RECENT_FIELDS)[:RECENT]]


PLAN_ROWS = 50
# Requests whose outcome is known (node-report.md section 4); "auto" and a package's own strategy
# names may resolve to anything, so they are never called unmet.
JUDGED_REQUESTS = ("mtp", "disabled", "ngram-cache", "ngram-suffix")


def plan_honoured(requested: str, effective: str) -> bool:
    """False only when a request of a known kind ran as something else (e.g. ``mtp`` -> ``disabled``)."""
    if requested not in JUDGED_REQUESTS or not effective:
        return True
    if requested == "mtp":
        return effective.startswith("native-mtp")
    if requested == "disabled":
        return effective == "disabled"
    return effective.endswith(requested)  # ngram-cache, or native-mtp+ngram-cache


def strategy_plans(reports: QuerySet[Report]) -> list[dict[str, Any]]:
    """Requested vs effective strategy per node and topology: what each node asked for and what ran.

    The effective strategy comes from the node (the ``stage.openai_decode`` span's attributes, or the
    report's ``speculative`` block); a requested plan that differs from the effective one is the
    thing to see. One grouped query; the busiest PLAN_ROWS groups.
    """
    rows = (
        reports.values("node__name", "stage_splits", "requested_strategy", "effective_strategy")
        .annotate(
            reports=Count("*"),
            from_spans=Count("id", filter=Q(source=Report.Source.OTLP)),
            tps=GroupMedian("predicted_per_second"),
            last_seen=Max("received_at"),
        )
        .order_by("-reports", "node__name", "stage_splits")
    )
    return [_plan(row) for row in rows[:PLAN_ROWS]]


def _plan(row: Mapping[str, Any]) -> dict[str, Any]:
    requested, effective = row["requested_strategy"], row["effective_strategy"]
    return {
        "node": row["node__name"],
        "stage_splits": row["stage_splits"],
        "requested_strategy": requested,
        "effective_strategy": effective,
        "differs": not plan_honoured(requested, effective),
        "reports": row["reports"],
        "from_spans": row["from_spans"],
        "tps": row["tps"],
        "last_seen": row["last_seen"],
    }


def catalog_throughput(revision_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per revision: median tok/s with and without MTP, report count, alert flag. One query."""
    unused_with_mtp = MTP_UNUSED & Q(revision__mtp_detected=True)
    rows = (
        Report.objects.filter(revision_id__in=revision_ids)
        .values("revision_id")
        .annotate(
            tps_mtp=Median("predicted_per_second", filter=MTP_ON),
            tps_no_mtp=Median("predicted_per_second", filter=MTP_OFF),
            reports=Count("*"),
            unused=Count("received_at", filter=unused_with_mtp),
        )
        .order_by()
    )
    result = {
        rid: {"tps_mtp": None, "tps_no_mtp": None, "reports": 0, "alert": False} for rid in revision_ids
    }
    for row in rows:
        result[row["revision_id"]] = {
            "tps_mtp": row["tps_mtp"],
            "tps_no_mtp": row["tps_no_mtp"],
            "reports": row["reports"],
            "alert": row["unused"] > 0,
        }
    return result


def alert_revision_ids() -> QuerySet[Revision, int]:
    """Ids of revisions whose weights hold MTP while their reports show it unused (a subquery)."""
    unused = Report.objects.filter(MTP_UNUSED, revision_id=OuterRef("pk"))
    return Revision.objects.filter(Exists(unused), mtp_detected=True).values_list("pk", flat=True)
