"""Celery tasks: thin wrappers that take ids and strings, call one service, and own the retry policy.

Hub failures that may pass (429, 5xx, network) are retried with backoff, honouring Retry-After;
deterministic failures (a malformed manifest or header, a missing repo) are recorded and not retried.
"""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from packages_app import hub, ingest

log = logging.getLogger(__name__)

MAX_RETRIES = 6
MAX_BACKOFF = 600


def retry_countdown(exc: hub.HubUnavailable, retries: int) -> float:
    """Retry-After when the Hub gave one, else exponential backoff."""
    if exc.retry_after is not None:
        return min(max(exc.retry_after, 1.0), MAX_BACKOFF)
    return float(min(2 ** (retries + 1), MAX_BACKOFF))


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def ingest_revision(self: Task, repo_id: str, commit_sha: str) -> str:
    try:
        outcome = ingest.ingest_revision(repo_id, commit_sha, claim=self.request.id)
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("ingest of %s@%s failed: %s", repo_id, commit_sha, exc)
        return "failed"
    return outcome.revision.status if outcome.ran else "skipped"


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def sync_package(self: Task, repo_id: str) -> int:
    try:
        return len(ingest.sync_package(repo_id))
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("sync of %s failed: %s", repo_id, exc)
        return 0


@shared_task
def sync_all_packages() -> int:
    """Periodic: re-read the commits of every tracked package."""
    from packages_app.models import Package

    repo_ids = list(Package.objects.filter(tracked=True).values_list("repo_id", flat=True))
    for repo_id in repo_ids:
        sync_package.delay(repo_id)
    return len(repo_ids)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def discover_packages(self: Task) -> int:
    """Periodic: track the namespaces' ``-layers`` repos and the packages of the curated catalog."""
    try:
        found = ingest.discover_packages(settings.MESHDASH_NAMESPACES, settings.MESHDASH_CATALOG_DATASET)
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    return len(found)


@shared_task
def reconcile_stuck_revisions() -> int:
    """Periodic: re-enqueue revisions left queued or running past the claim lease."""
    return len(ingest.reconcile_stuck())
