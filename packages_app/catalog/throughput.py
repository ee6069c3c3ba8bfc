"""The catalog's throughput columns: per revision, the median decode rate with and without MTP, the report
count and the unused-MTP alert flag (one query for a page of rows), and the alert filter's condition.

They read the every-node total cells without the topology split (models.RevisionRollup) through
throughput.py's stored-sketch helpers, never the raw reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import OuterRef, Q, Subquery

from packages_app import sketch
from packages_app.models import Revision, RevisionRollup, Rollup
from packages_app.throughput import merged_stored, stored


@dataclass(frozen=True)
class CatalogThroughput:
    """A catalog row's figures: median tok/s with and without MTP, reports, the alert flag."""

    tps_mtp: float | None
    tps_no_mtp: float | None
    reports: int
    alert: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


NO_THROUGHPUT = CatalogThroughput(tps_mtp=None, tps_no_mtp=None, reports=0, alert=False)


def catalog_throughput(revision_ids: Sequence[int]) -> dict[int, CatalogThroughput]:
    """Per revision: median tok/s with and without MTP, report count, alert flag. One query."""
    rows = (
        RevisionRollup.objects.filter(revision_id__in=revision_ids, grain=Rollup.Grain.TOTAL)
        # A subquery per row, not a join: the planner hashes the whole revision table for a join.
        .annotate(
            detected=Subquery(Revision.objects.filter(pk=OuterRef("revision_id")).values("mtp_detected"))
        )
        .annotate(tps=stored("tps_sketch"))
        .values_list("revision_id", "mtp_used", "reports", "unused", "tps", "detected")
        .order_by()
    )
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    result = dict.fromkeys(revision_ids, NO_THROUGHPUT)
    for revision_id, cells in grouped.items():
        result[revision_id] = _catalog_row(cells)
    return result


def _catalog_row(cells: list[tuple[Any, ...]]) -> CatalogThroughput:
    on = merged_stored(c[4] for c in cells if c[1])
    off = merged_stored(c[4] for c in cells if not c[1])
    return CatalogThroughput(
        tps_mtp=sketch.median(on),
        tps_no_mtp=sketch.median(off),
        reports=sum(c[2] for c in cells),
        alert=bool(cells[0][5]) and any(c[3] > 0 for c in cells),
    )


def latest_alert_q() -> Q:
    """Packages whose latest revision's weights hold MTP while its reports show it unused (over the
    latest revision the catalog joins already: no subquery)."""
    return Q(latest_revision__mtp_detected=True, latest_revision__last_served__last_unused_at__isnull=False)
