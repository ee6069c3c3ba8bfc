"""Read-side selectors over node reports: throughput series, MTP use and the unused-MTP alert.

Everything is aggregated in SQL (time buckets, counts, medians); Python only renames and divides
the few aggregated rows. ``tps`` is the median decode rate on PostgreSQL (percentile_cont); SQLite
has no percentile function, so there it is the mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Aggregate,
    Count,
    Exists,
    F,
    FloatField,
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
    totals = _totals(reports)
    mtp_detected = Revision.objects.filter(pk=revision_id, mtp_detected=True).exists()
    return {
        "series": _series(reports, bucket),
        "by_strategy": _by_strategy(reports),
        "mtp_on": {"reports": totals["on_reports"], "tps": totals["on_tps"]},
        "mtp_off": {"reports": totals["off_reports"], "tps": totals["off_tps"]},
        **_rates(totals),
        "stage_splits": _stage_splits(reports),
        "recent": _recent(reports),
        "alert": _alert(totals) if mtp_detected else None,
    }


def _series(reports: QuerySet[Report], bucket: str) -> list[dict[str, Any]]:
    rows = (
        reports.annotate(bucket=Trunc("received_at", bucket))
        .values("bucket", "effective_strategy", "stage_splits")
        .annotate(tps=Median("predicted_per_second"), reports=Count("id"))
        .order_by("bucket", "effective_strategy", "stage_splits")
    )
    return [
        {
            "bucket": row["bucket"],
            "strategy": row["effective_strategy"],
            "topology": row["stage_splits"],
            "tps": row["tps"],
            "reports": row["reports"],
        }
        for row in rows
    ]


def _by_strategy(reports: QuerySet[Report]) -> list[dict[str, Any]]:
    rows = (
        reports.values("effective_strategy")
        .annotate(reports=Count("id"), tps=Median("predicted_per_second"), **_speculative_sums())
        .order_by("effective_strategy")
    )
    return [
        {"strategy": row["effective_strategy"], "reports": row["reports"], "tps": row["tps"], **_rates(row)}
        for row in rows
    ]


def _totals(reports: QuerySet[Report]) -> dict[str, Any]:
    return reports.aggregate(
        on_reports=Count("id", filter=MTP_ON),
        on_tps=Median("predicted_per_second", filter=MTP_ON),
        off_reports=Count("id", filter=MTP_OFF),
        off_tps=Median("predicted_per_second", filter=MTP_OFF),
        unused_reports=Count("id", filter=MTP_UNUSED),
        unused_nodes=Count("node", filter=MTP_UNUSED, distinct=True),
        **_speculative_sums(),
    )


def _alert(totals: dict[str, Any]) -> dict[str, Any] | None:
    reports, nodes = totals["unused_reports"], totals["unused_nodes"]
    if not reports:
        return None
    message = (
        f"MTP weights present but never used in {reports} report{'s' if reports != 1 else ''} "
        f"from {nodes} node{'s' if nodes != 1 else ''}"
    )
    return {"message": message, "reports": reports, "nodes": nodes}


def _stage_splits(reports: QuerySet[Report]) -> list[str]:
    splits = reports.exclude(stage_splits="").order_by("stage_splits").values_list("stage_splits", flat=True)
    return list(splits.distinct())


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
)


def _recent(reports: QuerySet[Report]) -> list[dict[str, Any]]:
    rows = reports.order_by("-received_at", "-id").annotate(node_name=F("node__name"))
    return [dict(row) for row in rows.values(*RECENT_FIELDS)[:RECENT]]


def catalog_throughput(revision_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per revision: median tok/s with and without MTP, report count, alert flag. One query."""
    unused_with_mtp = MTP_UNUSED & Q(revision__mtp_detected=True)
    rows = (
        Report.objects.filter(revision_id__in=revision_ids)
        .values("revision_id")
        .annotate(
            tps_mtp=Median("predicted_per_second", filter=MTP_ON),
            tps_no_mtp=Median("predicted_per_second", filter=MTP_OFF),
            reports=Count("id"),
            unused=Count("id", filter=unused_with_mtp),
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
