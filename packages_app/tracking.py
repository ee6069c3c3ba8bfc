"""Services that follow packages: which repos meshdash tracks (an operator's request checked on the
Hub, a node's or a webhook's repo confirmed, a namespace discovered) and each package's commits, its
privacy and model card as the Hub says them.

Every write is keyed on a natural key, so re-runs and racing workers leave the same rows; the caller
enqueues the ingest of what a sync stored (``ingest.ingest_revision`` reads each revision). Nothing here
talks to the Hub directly: a source object (packages_app/hub/) is passed in or built from the repo id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from packages_app import hub, judgements
from packages_app.models import Package, Revision, TrackRequest
from packages_app.repo_ids import within_tracking_rules

log = logging.getLogger(__name__)


def track_package(repo_id: str, private: bool | None = None) -> Package:
    """Start following a package and store it; the caller enqueues its sync.

    ``private`` is what a Hub listing said of the repo (discover); without it a new row's privacy is
    unknown, and it is hidden like a private one until a sync asks the Hub.
    """
    hub.validate_repo_id(repo_id)
    package, _ = Package.objects.get_or_create(
        repo_id=repo_id, defaults={"tracked": True, "private": private}
    )
    if not package.tracked:
        Package.objects.filter(pk=package.pk).update(tracked=True)
    if private is not None:
        _record_listed_privacy(package, private)
    return package


def _record_listed_privacy(package: Package, private: bool) -> None:
    """A listing's word: it may hide a package (private), or make an unknown one public; a package a
    repo-info read found private is not made public by a listing."""
    if package.private is private or (package.private is True and not private):
        return
    Package.objects.filter(pk=package.pk).update(private=private)
    judgements.packages_changed([package.pk])
    package.private = private


def request_track(repo_id: str) -> TrackRequest:
    """An operator asked to track ``repo_id``: noted, no catalog row yet; the caller enqueues the Hub check
    (``tasks.track_package_task``, which calls ``track_checked``). Asking again starts a new check."""
    hub.validate_repo_id(repo_id)
    request, _ = TrackRequest.objects.update_or_create(
        repo_id=repo_id,
        defaults={
            "status": TrackRequest.Status.CHECKING,
            "message": "",
            "requested_at": timezone.now(),
            "checked_at": None,
        },
    )
    return request


def track_checked(repo_id: str, source: hub.PackageSource | None = None) -> Package | None:
    """Track ``repo_id`` once one Hub call (its head) shows the repo exists: the Package row is stored
    only then, with what the Hub says about privacy, and the request is done (deleted). A repo the Hub
    does not know is marked ``missing``, another refusal ``failed``, both with the Hub's sentence, and
    None is returned; a retryable Hub failure raises, for the task to retry. A package already stored
    is tracked again without asking."""
    package = Package.objects.filter(repo_id=repo_id).first()
    if package is None:
        source = source or hub.HubSource(repo_id)
        try:
            source.resolve_revision(None)
        except hub.HubNotFound as exc:
            _track_request_ended(repo_id, TrackRequest.Status.MISSING, f"The Hub has no such repo: {exc}")
            return None
        except hub.HubError as exc:
            if exc.retryable:
                raise
            _track_request_ended(repo_id, TrackRequest.Status.FAILED, str(exc))
            return None
    with transaction.atomic():
        package = track_package(repo_id)
        if source is not None:
            record_privacy(package, source)
        TrackRequest.objects.filter(repo_id=repo_id).delete()
    return package


def record_track_failure(repo_id: str, message: str) -> None:
    """The Hub check of a track request gave up (retries spent, or quarantined): say so on the ingest page."""
    _track_request_ended(repo_id, TrackRequest.Status.FAILED, message)


def _track_request_ended(repo_id: str, status: str, message: str) -> None:
    TrackRequest.objects.update_or_create(
        repo_id=repo_id,
        defaults={"status": status, "message": message[:500], "checked_at": timezone.now()},
        create_defaults={
            "status": status,
            "message": message[:500],
            "checked_at": timezone.now(),
            "requested_at": timezone.now(),
        },
    )


def confirm_package(repo_id: str, source: hub.PackageSource | None = None) -> Package | None:
    """The package a node report or a webhook named, tracked only once the Hub confirms the repo.

    A request only names a repo; this decides, in the worker: a package already stored is returned
    as it is; otherwise the repo must be within the tracking rules (``repo_ids.within_tracking_rules``)
    and the Hub must know it (its head resolves), or nothing is stored and None is returned. What the
    Hub says about privacy is stored with the row. A retryable Hub failure raises, for the task to retry.
    """
    package = Package.objects.filter(repo_id=repo_id).first()
    if package is not None:
        return package
    if not within_tracking_rules(repo_id, settings.MESHDASH_NAMESPACES):
        log.info("not tracking %s: outside the tracking rules (MESHDASH_NAMESPACES)", repo_id)
        return None
    source = source or hub.HubSource(repo_id)
    try:
        source.resolve_revision(None)
    except hub.HubError as exc:
        if exc.retryable:
            raise
        log.info("not tracking %s: the Hub does not confirm it (%s)", repo_id, exc)
        return None
    if getattr(source, "holds_manifest", None) is False:  # None: the source did not say; the ingest will
        log.info("not tracking %s: its head holds no %s, so it is no package", repo_id, hub.MANIFEST_PATH)
        return None
    with transaction.atomic():
        package = track_package(repo_id)
        record_privacy(package, source)
        record_card(package, source)
    return package


def sync_package(repo_id: str, source: hub.PackageSource | None = None) -> list[Revision]:
    """Record every commit of the package; the caller enqueues the ingest of those still queued."""
    source = source or hub.HubSource(repo_id)
    package, _ = Package.objects.get_or_create(repo_id=repo_id)
    try:
        # Pin the head first, so the history read is that commit's even if a push lands meanwhile.
        head = source.resolve_revision(None)
        commits = source.list_commits(head)[: settings.MESHDASH_MAX_REVISIONS]
    except hub.HubError as exc:
        Package.objects.filter(pk=package.pk).update(sync_error=str(exc), last_synced_at=timezone.now())
        raise
    record_privacy(package, source)
    record_card(package, source)
    revisions = [_revision_for_commit(package, c) for c in commits]
    refresh_latest(package)
    Package.objects.filter(pk=package.pk).update(sync_error="", last_synced_at=timezone.now())
    return revisions


@dataclass(frozen=True)
class Discovery:
    found: list[str]  # every package the namespaces and the catalog name
    tracked: list[str]  # those tracked by this discovery, whose sync the caller enqueues


def discover_packages(
    namespaces: list[str], catalog_dataset: str | None, on_skip: hub.SkipFn | None = None
) -> Discovery:
    """Track every package of the namespaces (a repo holding model-package.json, whatever it is called:
    docs/rules.md section 6b) and every package the curated catalog lists, whose catalog rows (with the
    source model's revision) are stored with it.

    A listed repo id that is not valid is skipped and reported (``on_skip``, and the log), never fatal.
    """
    skip = on_skip or _log_skipped
    found: set[str] = set()
    listed: dict[str, bool | None] = {}  # what the namespace listings said of each repo's privacy
    for namespace in namespaces:
        listed.update(hub.namespace_packages(namespace, on_skip=skip))
    found.update(listed)
    rows: dict[str, list[dict[str, object]]] = {}
    if catalog_dataset:
        try:
            for row in hub.catalog_package_rows(catalog_dataset, on_skip=skip):
                if row.repo.split("/")[0] in namespaces:
                    found.add(row.repo)
                    rows.setdefault(row.repo, []).append(row.to_json())
        except hub.HubNotFound:
            log.info("catalog dataset %s not found; skipped", catalog_dataset)
    stored = {p.repo_id: p for p in Package.objects.filter(repo_id__in=found)}
    new = sorted(found - set(stored))
    for repo_id in new:
        stored[repo_id] = track_package(repo_id, listed.get(repo_id))
    for repo_id, package in stored.items():
        said = listed.get(repo_id)
        if said is not None:
            _record_listed_privacy(package, said)
        if catalog_dataset and package.catalog_rows != rows.get(repo_id, []):
            Package.objects.filter(pk=package.pk).update(catalog_rows=rows.get(repo_id, [])[:50])
    return Discovery(found=sorted(found), tracked=new)


def _log_skipped(repo_id: str, reason: str) -> None:
    log.warning("discover: skipped %r: %s", repo_id, reason)


def _revision_for_commit(package: Package, commit: hub.CommitInfo) -> Revision:
    revision, created = Revision.objects.get_or_create(
        package=package,
        commit_sha=commit.sha,
        defaults={"committed_at": commit.date, "title": commit.title},
    )
    if not created and revision.committed_at is None and commit.date is not None:
        Revision.objects.filter(pk=revision.pk).update(committed_at=commit.date, title=commit.title)
    return revision


def refresh_latest(package: Package) -> None:
    latest = package.revisions.order_by(F("committed_at").desc(nulls_last=True), "-id").first()
    Package.objects.filter(pk=package.pk).update(latest_revision=latest)
    judgements.packages_changed([package.pk])


def record_sync_error(repo_id: str, message: str) -> None:
    Package.objects.filter(repo_id=repo_id).update(sync_error=message, last_synced_at=timezone.now())


def record_privacy(package: Package, source: hub.PackageSource) -> None:
    """Store what the Hub said about the repo's visibility (a source that never asked says nothing)."""
    private = getattr(source, "private", None)
    if private is not None and private != package.private:
        Package.objects.filter(pk=package.pk).update(private=private)
        judgements.packages_changed([package.pk])
        package.private = private


def record_card(package: Package, source: hub.PackageSource) -> None:
    """Store what the head's model card says (base_model, tags); a source that never asked says nothing."""
    card = getattr(source, "card", None)
    if not isinstance(card, hub.ModelCard):
        return
    base = card.base_model[0] if card.base_model else ""
    tags = list(card.tags)
    if (package.base_model, package.card_tags) != (base, tags):
        Package.objects.filter(pk=package.pk).update(base_model=base, card_tags=tags)
        package.base_model, package.card_tags = base, tags
