"""The ingest page's read: revisions queued, running and failed, packages whose last sync failed, and
the track requests the Hub has not confirmed."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, F

from packages_app.models import Package, Revision, TrackRequest

_INGEST_FIELDS = (
    "package__repo_id",
    "commit_sha",
    "committed_at",
    "status",
    "error",
    "attempts",
    "files_total",
    "files_done",
    "queued_at",
    "started_at",
    "finished_at",
)


@dataclass(frozen=True)
class IngestOverview:
    unfinished: list[Revision]
    failed: list[Revision]
    sync_errors: list[Package]
    counts: dict[str, int]
    track_requests: list[TrackRequest] = field(default_factory=list)


def ingest_overview(
    limit: int = 100, show_private: bool = False, show_track_requests: bool = False
) -> IngestOverview:
    """Queued and running ingests (oldest first), recent failures, packages whose sync failed, and (for
    those who may track) the track requests the Hub has not confirmed: checking, missing or failed."""
    visible = Revision.objects.all() if show_private else Revision.objects.filter(package__private=False)
    revisions = visible.select_related("package").only(*_INGEST_FIELDS)
    unfinished = revisions.unfinished().order_by("queued_at", "id")[:limit]
    failed = revisions.filter(status=Revision.Status.FAILED).order_by(
        F("finished_at").desc(nulls_last=True), "-id"
    )[:limit]
    sync_errors = (
        Package.objects.visible(show_private)
        .exclude(sync_error="")
        .only("repo_id", "sync_error", "last_synced_at")
    )
    counts = {status: 0 for status in Revision.Status.values}
    for row in visible.values("status").annotate(n=Count("id")).order_by():
        counts[row["status"]] = row["n"]
    requests = list(TrackRequest.objects.all()[:limit]) if show_track_requests else []
    return IngestOverview(list(unfinished), list(failed), list(sync_errors[:limit]), counts, requests)
