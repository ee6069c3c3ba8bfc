"""How the edges (web/: pages, the report API, the webhook; and the commands) hand work to Celery workers.

Services never enqueue; they return what must be queued, and an edge passes it here. Every enqueue waits
for the transaction to commit, so a worker never looks for a row that is not there yet. The tasks module is
imported when work is queued, not at start-up: it loads the Hub client, which read-only pages never need.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.core.cache import cache
from kombu.exceptions import OperationalError as BrokerUnreachable
from redis.exceptions import ConnectionError as RedisUnreachable
from redis.exceptions import TimeoutError as RedisTimeout

log = logging.getLogger(__name__)

# What an enqueue, or the shared cache (rate limits, the login throttle), raises while Redis is down:
# Celery's publish wraps the connection error in kombu's OperationalError; the cache raises redis's own.
BROKER_DOWN = (BrokerUnreachable, RedisUnreachable, RedisTimeout)

INGEST_REQUEST_TTL = 3600  # seconds; one enqueue per unknown revision per hour, not one per report


def enqueue_sync(repo_id: str) -> None:
    """Sync a package's commits (and so ingest its new revisions) once the caller's transaction commits."""
    from packages_app import tasks

    tasks.sync_package_task.delay_on_commit(repo_id)


def enqueue_track(repo_id: str) -> None:
    """Ask the Hub whether an operator's repo exists, then track and sync it (tasks.track_package_task)."""
    from packages_app import tasks

    tasks.track_package_task.delay_on_commit(repo_id)


def enqueue_reingest(repo_id: str, shas: list[str]) -> None:
    """Ingest these revisions of a package again (an operator's re-ingest) once the caller's transaction
    commits. With no broker the background pool enqueues them, so the eager ingests never run inside the
    request; ``background.PoolFull`` when the pool is full."""
    from packages_app import background, tasks

    if background.eager():
        background.submit(_ingest_each, repo_id, shas)
    else:
        for sha in shas:
            tasks.ingest_revision_task.delay_on_commit(repo_id, sha)


def _ingest_each(repo_id: str, shas: list[str]) -> None:
    from packages_app import tasks

    for sha in shas:
        tasks.ingest_revision_task.delay(repo_id, sha)


def request_ingests(revisions: Iterable[tuple[str, str]]) -> int:
    """Ask for the ingest of revisions nodes run but we have not stored; returns how many were enqueued."""
    return sum(request_ingest(repo_id, sha) for repo_id, sha in set(revisions))


def request_ingest(repo_id: str, commit_sha: str) -> bool:
    """Enqueue the ingest of one revision nodes run, for tracked namespaces, at most once an hour.

    Never lets the ingest slow or fail the report that asked for it: with no broker, Celery runs
    tasks eagerly, which would mean minutes of Hub reads inside a node's request, so then nothing
    is enqueued (the periodic sync, or `manage.py ingest`, brings the revision in); a broker
    error is logged and the request is retried by a later report.
    """
    if repo_id.split("/", 1)[0] not in settings.MESHDASH_NAMESPACES:
        return False
    if settings.CELERY_TASK_ALWAYS_EAGER:
        log.info("no Celery broker: not ingesting %s@%s inside a report request", repo_id, commit_sha)
        return False
    key = f"meshdash:ingest-requested:{repo_id}@{commit_sha}"
    if not cache.add(key, 1, INGEST_REQUEST_TTL):
        return False  # already asked recently; the ingest is keyed on (package, sha) anyway
    try:
        from packages_app import tasks

        tasks.ingest_revision_task.delay_on_commit(repo_id, commit_sha)
    except Exception:  # the report is stored either way; a later report asks again
        log.warning("could not enqueue ingest of %s@%s", repo_id, commit_sha, exc_info=True)
        cache.delete(key)
        return False
    return True


NODE_CHECK_TTL = 60  # seconds; a node's reports ask for at most one notification check a minute


def request_node_check(node_id: int) -> bool:
    """Look, after the commit and outside the request, at what the node now serves (notifications).

    Never delays or fails the report: the check (and any delivery) runs on a worker, or with no broker
    on the background threads; at most once a minute per node; a broker error is logged and skipped.
    """
    key = f"meshdash:node-check:{node_id}"
    if not cache.add(key, 1, NODE_CHECK_TTL):
        return False
    from packages_app import background, tasks

    try:
        if background.eager():
            background.submit(tasks.notify_node_serving, node_id)
        else:
            tasks.notify_node_serving.delay_on_commit(node_id)
    except Exception:  # the report is stored either way; its next report asks again
        log.warning("could not enqueue the notification check of node %s", node_id, exc_info=True)
        cache.delete(key)
        return False
    return True


def enqueue_open_fix(proposal_id: int) -> None:
    """Open a recorded fix proposal's pull request on the Hub (a worker does the Hub calls)."""
    from packages_app import tasks

    tasks.open_fix_task.delay_on_commit(proposal_id)


def enqueue_check_fix(proposal_id: int) -> None:
    """Read a fix proposal's pull request status back from the Hub."""
    from packages_app import tasks

    tasks.check_fix.delay_on_commit(proposal_id)


def enqueue_sync_now(repo_id: str, proposal_ids: list[int]) -> None:
    """An operator's "Sync from the Hub": the package's commits, and its followed pull requests' states."""
    from packages_app import tasks

    tasks.sync_package_task.delay_on_commit(repo_id)
    for proposal_id in proposal_ids:
        tasks.check_fix.delay_on_commit(proposal_id)
