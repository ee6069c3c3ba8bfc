"""Selector: the figures /metrics reads from the database at scrape time (ingest queue, revisions and
served revisions by headline status, nodes seen and silent, nodes needing action by cause, rollup lag).

Every grouping is by a closed vocabulary (verdicts.Status, verdicts.Cause, Revision.Status), never by a
repo or node name, so the series stay few whatever the catalog or the fleet grows to. A fixed number of
queries (about 10; nodes needing action from the kept judgements, packages_app.judgements); the edge
caches the result for a few seconds so that several scrapers, or several web workers, do not multiply them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min
from django.utils import timezone

from packages_app import judgements
from packages_app.models import Node, Package, Report, Revision, Serving
from packages_app.verdicts import Status

SERVED_WINDOW = timedelta(hours=1)
SEEN_WINDOW = timedelta(hours=1)
SILENT_AFTER = timedelta(minutes=15)  # a node that reported in the last day but not for this long
SILENT_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class DatabaseGauges:
    queued: int = 0
    running: int = 0
    oldest_queued_age: float = 0.0  # seconds; 0 when nothing waits
    revisions: dict[str, int] = field(default_factory=dict)  # headline status -> revisions
    latest_revisions: dict[str, int] = field(default_factory=dict)  # tracked packages' latest
    served: dict[str, int] = field(default_factory=dict)  # served in SERVED_WINDOW, by headline
    nodes_seen: int = 0
    nodes_silent: int = 0
    nodes_needing_action: dict[str, int] = field(default_factory=dict)  # cause -> nodes
    rollup_lag: float = 0.0  # seconds the rollups trail the newest linked report


def headline_of(value: str | None) -> str:
    """A stored headline as its label: one of verdicts.Status (empty = not assessed yet)."""
    if not value:
        return Status.NOT_ASSESSED.value
    return value if value in Status.__members__.values() else Status.NOT_ASSESSED.value


def by_status(rows: list[tuple[str | None, int]]) -> dict[str, int]:
    counts = {status.value: 0 for status in Status}
    for headline, n in rows:
        counts[headline_of(headline)] += n
    return counts


def current_figures(now: datetime | None = None) -> DatabaseGauges:
    now = now or timezone.now()
    queue = dict(
        Revision.objects.filter(status__in=[Revision.Status.QUEUED, Revision.Status.RUNNING])
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    oldest = Revision.objects.filter(status=Revision.Status.QUEUED).aggregate(at=Min("queued_at"))["at"]
    return DatabaseGauges(
        queued=queue.get(Revision.Status.QUEUED, 0),
        running=queue.get(Revision.Status.RUNNING, 0),
        oldest_queued_age=max((now - oldest).total_seconds(), 0.0) if oldest else 0.0,
        revisions=by_status(list(Revision.objects.values_list("headline").annotate(n=Count("id")))),
        latest_revisions=_latest_by_status(),
        served=_served_by_status(now - SERVED_WINDOW),
        nodes_seen=Node.objects.filter(last_seen_at__gte=now - SEEN_WINDOW).count(),
        nodes_silent=Node.objects.filter(
            revoked_at__isnull=True,
            last_seen_at__gte=now - SILENT_WINDOW,
            last_seen_at__lt=now - SILENT_AFTER,
        ).count(),
        nodes_needing_action=judgements.needing_action_by_cause(now),
        rollup_lag=_rollup_lag(now),
    )


def _latest_by_status() -> dict[str, int]:
    rows = (
        Package.objects.filter(tracked=True, latest_revision__isnull=False)
        .values_list("latest_revision__headline")
        .annotate(n=Count("id"))
    )
    return by_status(list(rows))


def _served_by_status(since: datetime) -> dict[str, int]:
    rows = (
        Serving.objects.filter(node_key=0, last_at__gte=since)
        .values_list("revision__headline")
        .annotate(n=Count("revision", distinct=True))
    )
    return by_status(list(rows))


def _rollup_lag(now: datetime) -> float:
    """Seconds between the newest report linked to a revision and the newest one the rollups hold (none
    held at all: the newest report's age)."""
    newest = Report.objects.filter(revision__isnull=False).aggregate(at=Max("received_at"))["at"]
    if newest is None:
        return 0.0
    rolled = Serving.objects.filter(node_key=0).aggregate(at=Max("last_at"))["at"]
    lag: timedelta = (now - newest) if rolled is None else (newest - rolled)
    return max(lag.total_seconds(), 0.0)
