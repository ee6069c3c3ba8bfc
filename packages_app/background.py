"""Work a web request starts but never does itself: Celery when a broker is set, else a small thread pool.

An edge helper (views call it). With a broker, ``enqueue`` sends the task once the transaction commits.
With eager tasks (no broker, the one-machine default) a task would run inside the request, so the call is
handed to MESHDASH_BACKGROUND_THREADS threads instead; while MESHDASH_BACKGROUND_QUEUE jobs already wait,
new work is refused (``PoolFull``) and the view says so. A job that dies with its process leaves its revision
``running``; ``reconcile_soon`` re-enqueues such revisions in both modes (beat runs it with a broker).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connections, transaction

log = logging.getLogger(__name__)

RECONCILE_EVERY = 300  # seconds between two reconciles started from web requests (eager mode)

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_pool: ThreadPoolExecutor | None = None
_pending = 0


class PoolFull(Exception):
    """The background pool already holds as much work as it may; nothing was started."""


def eager() -> bool:
    return not settings.CELERY_BROKER_URL


def ensure_room() -> None:
    """``PoolFull`` when eager work would be refused now; with a broker there is always room."""
    if eager() and _pending >= settings.MESHDASH_BACKGROUND_QUEUE:
        raise PoolFull("The server is busy with earlier work; try again in a few minutes.")


def submit(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on the pool once the current transaction commits; ``PoolFull`` if it is full."""
    if _pending >= settings.MESHDASH_BACKGROUND_QUEUE:
        raise PoolFull("The server is busy with earlier work; try again in a few minutes.")
    transaction.on_commit(lambda: _start(fn, args))


def hand_off(fn: Callable[..., Any], *args: Any) -> None:
    """With a broker ``fn`` only enqueues, so it runs here; eagerly it would do the work: a thread does."""
    if eager():
        submit(fn, *args)
    else:
        fn(*args)


def _start(fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[None]:
    global _pending
    with _lock:
        _pending += 1
    return _executor().submit(_run, fn, args)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            workers = max(1, settings.MESHDASH_BACKGROUND_THREADS)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshdash-bg")
        return _pool


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    global _pending
    close_old_connections()
    try:
        fn(*args)
    except Exception:  # a background job has no caller to raise to: the log (and the revision) say it
        log.exception("background job %s%r failed", getattr(fn, "__name__", fn), args)
    finally:
        connections.close_all()
        with _lock:
            _pending -= 1
            _idle.notify_all()


def pending() -> int:
    return _pending


def wait_idle(timeout: float) -> bool:
    """Block until no job is queued or running (tests, shutdown); False if ``timeout`` s passed first."""
    with _lock:
        return _idle.wait_for(lambda: _pending == 0, timeout)


def reconcile_soon() -> None:
    """Eager mode has no beat: re-enqueue stuck revisions from a request, at most every RECONCILE_EVERY s."""
    if not eager():
        return
    if not cache.add("meshdash:reconcile-from-web", time.time(), RECONCILE_EVERY):
        return
    from packages_app import tasks

    try:
        submit(tasks.reconcile_stuck_revisions)
    except PoolFull:
        cache.delete("meshdash:reconcile-from-web")
