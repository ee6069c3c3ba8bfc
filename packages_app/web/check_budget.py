"""A site-wide budget of manifest-check bytes in flight, shared by every web worker through the cache.

Checking a manifest costs CPU in proportion to its bytes (parse, audit, assessment: ~0.3 CPU s a MiB),
and each check holds a sync web worker while it runs. The per-address rate limit (ratelimit.py) bounds
one client, not twelve clients or one client behind many addresses: this bounds them all. A check takes
``weight(n)`` bytes of ``MESHDASH_CHECK_BUDGET_BYTES`` before it starts and gives them back when it ends;
when the budget is spent the check is refused at once (503 + Retry-After), never queued.

The count is kept in time slices (``SLICE`` seconds): a check adds its weight to the current slice's
counter, the bytes in flight are the sum of the last ``SLICES`` counters, and the end of the check takes
its weight back from the slice it added to. A worker killed mid-check (gunicorn's timeout, the OOM killer)
never gives its weight back: that slice expires, so a lost lease is forgotten within SLICE x SLICES
seconds instead of shrinking the budget forever. A check is judged on the counter its own atomic add
returned (what was in flight before it, plus itself), not on a read made after others added too: of
twelve racing checks the first to add are admitted, the rest refused, and the admitted never exceed the
budget (a refused check's weight counts against later ones until it is given back, which only errs on
the side of refusing). The cache being down lets checks through (like the rate limiter): a cache outage
must not take the check page down.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.cache import cache

from packages_app.layout import MAX_MANIFEST_BYTES

log = logging.getLogger(__name__)

SLICE = 60  # seconds: longer than any check (the web worker's own timeout ends one first)
SLICES = 3
MIN_WEIGHT = 64 * 1024  # a tiny check still holds a worker: it counts as 64 KiB
RETRY_AFTER = 5
KEY = "meshdash:check-bytes:"


class Busy(Exception):
    """The budget is spent: the answer is 503 with ``retry_after``."""

    def __init__(self, in_flight: int, budget: int, retry_after: int = RETRY_AFTER) -> None:
        super().__init__(in_flight, budget)
        self.in_flight, self.budget, self.retry_after = in_flight, budget, retry_after

    def message(self) -> str:
        return (
            f"The server is busy checking other manifests ({_mib(self.in_flight)} of its "
            f"{_mib(self.budget)} budget in flight); try again in {self.retry_after} s."
        )


def weight(size: int, budget: int) -> int:
    """What a check of ``size`` bytes takes from the budget: at least MIN_WEIGHT, at most the whole
    budget (a check bigger than the budget runs alone rather than never)."""
    return min(max(size, MIN_WEIGHT), budget)


@contextlib.contextmanager
def reserve(size: int) -> Iterator[None]:
    """Hold ``weight(size)`` bytes of the site-wide budget while the block runs; Busy when spent.

    ``MESHDASH_CHECK_BUDGET_BYTES`` 0 switches the budget off."""
    budget = settings.MESHDASH_CHECK_BUDGET_BYTES
    if budget <= 0:
        yield
        return
    taken = weight(size, budget)
    index = int(time.time() // SLICE)
    key = _slice_key(index)
    try:
        in_flight = _add(key, index, taken)
    except Exception:  # the cache is down: let the check through (it is still rate-limited per address)
        log.warning("check budget cache unavailable; letting a %d-byte check through", size, exc_info=True)
        yield
        return
    if in_flight > budget:
        _give_back(key, taken)
        raise Busy(in_flight - taken, budget)
    try:
        yield
    finally:
        _give_back(key, taken)


def in_flight() -> int:
    """The bytes of checks running now, site-wide (for tests and the bench)."""
    now = int(time.time() // SLICE)
    values = cache.get_many([_slice_key(now - i) for i in range(SLICES)])
    return sum(int(v) for v in values.values())


def _slice_key(index: int) -> str:
    return f"{KEY}{index}"


def _add(key: str, index: int, taken: int) -> int:
    """Add ``taken`` to this slice's counter; what is in flight up to and including this check: the
    counter the atomic add returned, plus the earlier live slices."""
    cache.add(key, 0, timeout=SLICE * (SLICES + 1))
    try:
        counted = int(cache.incr(key, taken))
    except ValueError:  # expired between add and incr
        cache.add(key, 0, timeout=SLICE * (SLICES + 1))
        counted = int(cache.incr(key, taken))
    earlier = cache.get_many([_slice_key(index - i) for i in range(1, SLICES)])
    return counted + sum(int(v) for v in earlier.values())


def _give_back(key: str, taken: int) -> None:
    try:
        cache.decr(key, taken)
    except ValueError:
        pass  # the slice expired: nothing left to give back
    except Exception:
        log.warning("check budget cache unavailable; %d bytes not given back", taken, exc_info=True)


def size_limit(authenticated: bool) -> int:
    """The largest manifest this visitor may have checked: MESHDASH_CHECK_ANON_MAX_BYTES for anonymous
    visitors, the format's 16 MiB (layout.MAX_MANIFEST_BYTES) for signed-in users."""
    if authenticated:
        return MAX_MANIFEST_BYTES
    return min(settings.MESHDASH_CHECK_ANON_MAX_BYTES, MAX_MANIFEST_BYTES)


def upload_limit_text(authenticated: bool) -> str:
    """How big an upload this visitor may check, for the page: "16 MiB", or "4.0 MiB; 16 MiB signed in"."""
    limit = size_limit(authenticated)
    return "16 MiB" if limit >= MAX_MANIFEST_BYTES else f"{_mib(limit)}; 16 MiB signed in"


def too_big_message(limit: int, authenticated: bool) -> str:
    who = "" if authenticated or limit >= MAX_MANIFEST_BYTES else " without signing in (16 MiB signed in)"
    return f"The manifest must be at most {limit} bytes ({_mib(limit)}){who}."


DRAIN_LIMIT = MAX_MANIFEST_BYTES + 64 * 1024


def drain(stream: Any, declared: int) -> None:
    """Read and drop a refused body of at most the format's 16 MiB (in 64 KiB pieces, never held), so a
    proxy that already sent it sees the answer (413) rather than a closed connection (its 502)."""
    left = declared if 0 < declared <= DRAIN_LIMIT else 0
    while left > 0:
        piece = stream.read(min(left, 64 * 1024))
        if not piece:
            return
        left -= len(piece)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
