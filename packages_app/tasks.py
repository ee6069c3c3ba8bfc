"""Celery tasks: thin wrappers that take ids and strings, call one service, and own the retry policy.

Hub failures that may pass (429, 5xx, network) are retried with backoff, honouring Retry-After;
deterministic failures (a malformed manifest or header, a missing repo) are recorded and not retried.
Messages are acknowledged late, so a worker that dies mid-task loses nothing; a message whose
deliveries keep dying (it crashes or hangs its worker) is quarantined after MAX_DELIVERIES of them.

A task is named for its service plus ``_task`` where it runs one of the same name (packages_app/README.md,
Naming); a task renamed keeps its registered name (``name=``), so messages queued before an upgrade still run.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict
from typing import Any, TypeVar

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import InterfaceError, OperationalError, connection

from packages_app import (
    fix_following,
    fix_proposals,
    hub,
    ingest,
    metrics,
    notifications,
    partitions,
    tracking,
)
from packages_app.hub.outbound import DeliveryFailed
from packages_app.rollups.rebuild import prune_hourly

log = logging.getLogger(__name__)

MAX_RETRIES = 6
MAX_BACKOFF = 600
MAX_DELIVERIES = 3
# Spans any series of redeliveries (each can wait a visibility timeout or a hard time limit) and
# lets the counters of messages that were never delivered again expire.
DELIVERY_COUNT_TTL = 24 * 3600
QUARANTINED = "quarantined"
# The database going away (a restart, a failover, a network blip) is retried like a Hub outage, with
# its own budget: up to about 9 minutes of backoff before the task gives up (and the reconciler takes over).
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
DB_MAX_RETRIES = 12
DB_MAX_BACKOFF = 60
UNCONFIRMED = "unconfirmed"  # the repo a node named is not stored, and the Hub does not confirm it

TaskFn = TypeVar("TaskFn", bound=Callable[..., Any])
PoisonFn = Callable[..., None]


def database_countdown(retries: int) -> float:
    """Exponential backoff for a database outage: 2, 4, 8 ... seconds, at most DB_MAX_BACKOFF."""
    return float(min(2 ** (retries + 1), DB_MAX_BACKOFF))


def retry_on_database_error(task: Task, exc: Exception) -> Exception:
    """The Retry to raise for a database error: the message is re-sent with a countdown, not failed."""
    log.warning("%s%r: the database is unavailable (%s); retrying", task.name, task.request.args, exc)
    countdown = database_countdown(task.request.retries)
    return task.retry(exc=exc, countdown=countdown, max_retries=DB_MAX_RETRIES)  # type: ignore[no-any-return]


def retry_countdown(exc: hub.HubUnavailable, retries: int) -> float:
    """Retry-After when the Hub gave one, else exponential backoff."""
    if exc.retry_after is not None:
        return min(max(exc.retry_after, 1.0), MAX_BACKOFF)
    return float(min(2 ** (retries + 1), MAX_BACKOFF))


# --- poison messages ------------------------------------------------------------------------------
# A delivery is counted (in the shared cache, keyed on the task id, which a re-delivered message keeps)
# when it starts and forgotten when it ends in any way, retries included; what remains counts the
# deliveries that died with their worker. Separately enqueued duplicates have their own ids and counts.


def _delivery_key(task: Task) -> str:
    return f"meshdash:deliveries:{task.name}:{task.request.id}"


def count_delivery(key: str) -> int:
    """Count this delivery; return how many earlier ones started and never finished."""
    try:
        cache.add(key, 0, DELIVERY_COUNT_TTL)
        return int(cache.incr(key)) - 1
    except Exception:  # a cache outage must not stop the work; it only disables quarantine
        log.warning("delivery counter unavailable for %s", key, exc_info=True)
        return 0


def forget_delivery(key: str) -> None:
    try:
        cache.delete(key)
    except Exception:
        log.warning("could not clear delivery counter %s", key, exc_info=True)


def quarantine_after_dead_deliveries(on_poison: PoisonFn) -> Callable[[TaskFn], TaskFn]:
    """After MAX_DELIVERIES deliveries that never finished, call on_poison(*args, message) and ack."""

    def decorate(fn: TaskFn) -> TaskFn:
        @functools.wraps(fn)
        def wrapper(self: Task, *args: Any) -> Any:
            key = _delivery_key(self)
            dead = count_delivery(key)
            if dead >= MAX_DELIVERIES:
                message = f"quarantined after {dead} deliveries that never finished"
                log.error("%s%r %s", self.name, args, message)
                on_poison(*args, message)
                forget_delivery(key)
                return QUARANTINED
            try:
                result = fn(self, *args)
            except Exception:  # finished, badly (Retry included); not SystemExit from a hard kill
                forget_delivery(key)
                raise
            forget_delivery(key)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def _no_revision_state(*args: Any) -> None:
    """Poison handler of tasks that have no row to mark: the log line is the record."""


# --- tasks ---------------------------------------------------------------------------------------


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.ingest_revision")
@quarantine_after_dead_deliveries(ingest.quarantine_revision)
def ingest_revision_task(self: Task, repo_id: str, commit_sha: str) -> str:
    count = metrics.count_ingest  # every way out is counted by outcome (/metrics: meshdash_ingests_total)
    try:
        # Nodes ask for revisions of repos they name: those stay unlinked unless the Hub confirms them.
        if tracking.confirm_package(repo_id) is None:
            return count(UNCONFIRMED)
        outcome = ingest.ingest_revision(repo_id, commit_sha, claim=self.request.id)
        # a merged fix waiting for this revision's headline
        settled = fix_following.settle_revision(outcome.revision.pk)
    except SoftTimeLimitExceeded:
        limit = int(self.soft_time_limit or settings.CELERY_TASK_SOFT_TIME_LIMIT)
        status = ingest.release_timed_out(repo_id, commit_sha, limit, give_up_after=MAX_DELIVERIES)
        log.warning("ingest of %s@%s hit the soft time limit; now %s", repo_id, commit_sha, status)
        return count("timed-out")
    except hub.HubUnavailable as exc:
        count("retry-hub")
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("ingest of %s@%s failed: %s", repo_id, commit_sha, exc)
        return count("failed")
    except DATABASE_ERRORS as exc:
        count("retry-database")
        raise retry_on_database_error(self, exc) from exc
    if outcome.ran and outcome.revision.status == "done":
        notify_revision.delay_on_commit(outcome.revision.pk)
        # a new audit of an open PR's base
        for proposal_id in fix_proposals.proposals_based_on(outcome.revision.pk):
            update_fix_task.delay_on_commit(proposal_id)
    for proposal_id in settled:  # landed: meshdash's verdict goes on the PR
        check_fix.delay_on_commit(proposal_id)
    return count(outcome.revision.status if outcome.ran else "skipped")


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.sync_package")
@quarantine_after_dead_deliveries(tracking.record_sync_error)
def sync_package_task(self: Task, repo_id: str) -> int:
    try:
        if tracking.confirm_package(repo_id) is None:  # a webhook named a repo we do not store
            return 0
        revisions = tracking.sync_package(repo_id)
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("sync of %s failed: %s", repo_id, exc)
        return 0
    except DATABASE_ERRORS as exc:
        raise retry_on_database_error(self, exc) from exc
    from packages_app.models import Revision

    for revision in revisions:
        if revision.status == Revision.Status.QUEUED:
            ingest_revision_task.delay_on_commit(repo_id, revision.commit_sha)
    return len(revisions)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.track_package")
@quarantine_after_dead_deliveries(tracking.record_track_failure)
def track_package_task(self: Task, repo_id: str) -> str:
    """An operator's track: the Hub must confirm the repo (one call) before it is stored and synced."""
    try:
        package = tracking.track_checked(repo_id)
    except hub.HubUnavailable as exc:
        if self.request.retries >= (self.max_retries or 0):
            tracking.record_track_failure(repo_id, f"The Hub did not answer: {exc}")
            return "failed"
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except DATABASE_ERRORS as exc:
        raise retry_on_database_error(self, exc) from exc
    if package is None:
        return "not-tracked"
    sync_package_task.delay_on_commit(repo_id)
    return "tracked"


@shared_task
def sync_all_packages() -> int:
    """Periodic: re-read the commits of every tracked package."""
    from packages_app.models import Package

    repo_ids = list(Package.objects.filter(tracked=True).values_list("repo_id", flat=True))
    for repo_id in repo_ids:
        sync_package_task.delay(repo_id)
    return len(repo_ids)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.discover_packages")
@quarantine_after_dead_deliveries(_no_revision_state)
def discover_packages_task(self: Task) -> int:
    """Periodic: track the namespaces' ``-layers`` repos and the packages of the curated catalog."""
    try:
        discovery = tracking.discover_packages(
            settings.MESHDASH_NAMESPACES, settings.MESHDASH_CATALOG_DATASET
        )
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    for repo_id in discovery.tracked:
        sync_package_task.delay_on_commit(repo_id)
    return len(discovery.found)


@shared_task
def reconcile_stuck_revisions() -> int:
    """Periodic: re-enqueue revisions left queued or running past the claim lease."""
    stuck = ingest.reconcile_stuck()
    for repo_id, sha in stuck:
        ingest_revision_task.delay_on_commit(repo_id, sha)
    return len(stuck)


@shared_task(acks_late=True)
def prune_hourly_rollups() -> int:
    """Delete hour rollups past MESHDASH_ROLLUP_HOURLY_DAYS (their reports are in the day rollups).
    Idempotent: a redelivery deletes nothing more."""
    return prune_hourly()


@shared_task(acks_late=True)
def maintain_report_partitions() -> dict[str, object]:
    """Daily: create the coming months' report partitions, drop the months past the retention.
    Idempotent: a redelivery finds the partitions made and the old months gone."""
    upkeep = partitions.maintain()
    if upkeep.created or upkeep.dropped:
        log.info("report partitions: created %s, dropped %s", upkeep.created, upkeep.dropped)
    return asdict(upkeep)


# --- notifications (packages_app/notifications.py) ----------------------------------------------------

NOTIFY_MAX_RETRIES = 8  # about 4 hours of backoff: 30 s, 1 min, 2 min, ... capped at NOTIFY_MAX_BACKOFF
NOTIFY_MAX_BACKOFF = 3600


@shared_task(acks_late=True)
def notify_revision(revision_id: int) -> int:
    """After an ingest: is the package's new latest revision worse than the one before? Sends once."""
    return _enqueue_deliveries(notifications.revision_events(revision_id))


@shared_task(acks_late=True)
def notify_node_serving(node_id: int) -> int:
    """After a node's reports: does it now serve a refused, uncertified or MTP-unused revision? Once each."""
    return _enqueue_deliveries(notifications.node_serving_events(node_id))


@shared_task(acks_late=True)
def notify_operations() -> int:
    """Periodic: an ingest stuck for an hour, a node that stopped reporting (each sent once); and the
    deliveries a stopped worker left pending, sent again or failed (notifications.stale_deliveries)."""
    return _enqueue_deliveries(notifications.operations_events() + notifications.stale_deliveries())


def _enqueue_deliveries(ids: list[int]) -> int:
    for delivery_id in ids:
        deliver_notification.delay_on_commit(delivery_id)
    return len(ids)


@shared_task(bind=True, max_retries=NOTIFY_MAX_RETRIES, acks_late=True)
def deliver_notification(self: Task, delivery_id: int) -> str:
    """One message to one channel, retried with exponential backoff while the receiver is down or slow."""
    if self.request.is_eager:
        return _deliver_eagerly(delivery_id)
    try:
        return notifications.deliver(delivery_id)
    except DeliveryFailed as exc:
        if self.request.retries >= NOTIFY_MAX_RETRIES:
            notifications.give_up(delivery_id, str(exc))
            return notifications.FAILED
        countdown = min(30 * 2**self.request.retries, NOTIFY_MAX_BACKOFF)
        raise self.retry(exc=exc, countdown=countdown) from exc


# --- pull requests with a patched manifest (fixes) ----------------------------------------------------


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.open_fix")
@quarantine_after_dead_deliveries(_no_revision_state)
def open_fix_task(self: Task, proposal_id: int) -> str:
    """Send a recorded proposal to the Hub: one PR, or a re-audit when the head moved."""
    from packages_app.models import FixProposal

    proposal = FixProposal.objects.filter(pk=proposal_id).first()
    if proposal is None:
        return "gone"
    try:
        return str(fix_proposals.open_fix(proposal).status)
    except hub.HubUnavailable as exc:
        if self.request.retries >= (self.max_retries or 0):
            fix_proposals.record_failure(proposal, f"the Hub did not answer: {exc}")
            return "failed"
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("fix proposal %s failed: %s", proposal_id, exc)
        fix_proposals.record_failure(proposal, str(exc))
        return "failed"
    except DATABASE_ERRORS as exc:
        raise retry_on_database_error(self, exc) from exc
    except (Exception, SoftTimeLimitExceeded) as exc:  # a bug, or the time limit: never left "opening"
        fix_proposals.record_failure(proposal, f"meshdash could not finish it ({type(exc).__name__})")
        raise


_eager_deliveries: ThreadPoolExecutor | None = None
_eager_futures: set[Future[str]] = set()
_eager_lock = threading.Lock()


def _deliver_eagerly(delivery_id: int) -> str:
    """No broker (one machine): deliveries run on two threads of their own, so a receiver that hangs holds
    up neither the ingest nor the report that found the event; the retries run there at once (eager
    Celery raises a retry instead of scheduling it)."""
    global _eager_deliveries
    with _eager_lock:
        if _eager_deliveries is None:
            _eager_deliveries = ThreadPoolExecutor(max_workers=2, thread_name_prefix="meshdash-notify")
        future = _eager_deliveries.submit(_deliver_with_retries, delivery_id)
        _eager_futures.add(future)
    future.add_done_callback(_eager_futures.discard)
    return "queued"


def _deliver_with_retries(delivery_id: int) -> str:
    error = ""
    try:
        for attempt in range(NOTIFY_MAX_RETRIES + 1):
            try:
                return notifications.deliver(delivery_id)
            except DeliveryFailed as exc:
                error = str(exc)
            except DATABASE_ERRORS as exc:  # SQLite busy with another thread's write: wait a little
                error = str(exc)
                connection.close()
                time.sleep(min(0.25 * 2**attempt, 5))
        notifications.give_up(delivery_id, error)
        return notifications.FAILED
    except Exception:  # no caller to raise to: the log and the delivery row say it
        log.exception("delivery %s failed", delivery_id)
        return notifications.FAILED
    finally:
        connection.close()


def wait_eager_deliveries(timeout: float) -> bool:
    """Block until the eager deliveries started so far have ended (tests, shutdown)."""
    with _eager_lock:
        pending = set(_eager_futures)
    return not wait(pending, timeout).not_done


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def check_fix(self: Task, proposal_id: int) -> str:
    """Read one PR's status back from the Hub (a webhook's discussion event, the periodic check, an operator's
    sync, an ingest that settled it), and once it landed, comment meshdash's verdict on it."""
    from packages_app.models import FixProposal

    proposal = FixProposal.objects.filter(pk=proposal_id).first()
    if proposal is None:
        return "gone"
    try:
        return str(fix_following.follow_fix(proposal).status)
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("checking fix proposal %s failed: %s", proposal_id, exc)
        fix_proposals.record_check_failure(proposal, str(exc))
        return "failed"


@shared_task
def check_fix_proposals() -> int:
    """Periodic: every open PR's status, and merged ones whose revision is not settled yet."""
    ids = fix_following.proposals_to_check()
    for proposal_id in ids:
        check_fix.delay(proposal_id)
    return len(ids)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True, name="packages_app.tasks.update_fix")
def update_fix_task(self: Task, proposal_id: int) -> str:
    """A new audit of an open PR's base revision: push the changed patched manifest to ``refs/pr/N``."""
    from packages_app.models import FixProposal

    proposal = FixProposal.objects.filter(pk=proposal_id).first()
    if proposal is None:
        return "gone"
    try:
        return str(fix_proposals.update_fix(proposal).status)
    except hub.HubUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(exc, self.request.retries)) from exc
    except hub.HubError as exc:
        log.warning("updating fix proposal %s failed: %s", proposal_id, exc)
        return "failed"
