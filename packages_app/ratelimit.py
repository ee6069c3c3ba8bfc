"""A fixed one-minute window per key in the Django cache (Redis when configured, so shared by web workers).

For anonymous endpoints that do real work per request (checking a manifest); node reports have their own
per-node limiter in nodes/identity.py. The limiter fails open when the cache is down.
"""

from __future__ import annotations

import logging
import math
import time

from django.core.cache import cache
from django.http import HttpRequest

log = logging.getLogger(__name__)
WINDOW = 60


def client_key(request: HttpRequest, scope: str) -> str:
    return f"meshdash:rate:{scope}:{request.META.get('REMOTE_ADDR') or 'unknown'}"


def retry_after(key: str, limit: int) -> int | None:
    """Count one request for ``key``; the seconds to wait when over ``limit`` per minute, else None."""
    if limit <= 0:
        return None
    now = time.time()
    window = int(now // WINDOW)
    try:
        count = _count(f"{key}:{window}")
    except Exception:  # a cache outage must not take the page down; the limiter fails open
        log.warning("rate limiter cache unavailable; letting %s through", key, exc_info=True)
        return None
    return None if count <= limit else max(1, math.ceil((window + 1) * WINDOW - now))


def _count(key: str) -> int:
    if cache.add(key, 1, timeout=WINDOW * 2):
        return 1
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=WINDOW * 2)
        return 1
