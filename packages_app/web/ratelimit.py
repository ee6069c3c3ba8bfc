"""A fixed one-minute window per key in the Django cache (Redis when configured, so shared by web workers).

For anonymous endpoints that do real work per request (checking a manifest); node reports have their own
per-node limiter in nodes/identity.py. The limiter fails open when the cache is down.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

log = logging.getLogger(__name__)
WINDOW = 60


def client_key(request: HttpRequest, scope: str) -> str:
    return f"meshdash:rate:{scope}:{client_address(request) or 'unknown'}"


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or behind a trusted proxy (``MESHDASH_TRUSTED_PROXIES``) the
    nearest address in X-Forwarded-For that is not a trusted proxy. Off by default: a forwarded header
    is the client's to forge unless a proxy we run sets it."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    trusted = _networks(tuple(getattr(settings, "MESHDASH_TRUSTED_PROXIES", ()) or ()))
    forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR") or "")
    return forwarded_client(peer, forwarded, trusted)


def forwarded_client(peer: str, forwarded: str, trusted: tuple[IPNetwork, ...]) -> str:
    """Walk X-Forwarded-For from the right (the hop nearest us) while each address is a trusted proxy;
    the first that is not is the client. A malformed entry stops the walk at the last trusted hop."""
    if not trusted or not _is_trusted(peer, trusted):
        return peer
    client = peer
    for hop in reversed(forwarded.split(",")[-MAX_HOPS:]):
        try:
            address = ipaddress.ip_address(hop.strip())
        except ValueError:
            return client  # a forged or garbled entry: believe no further
        client = str(address)
        if not any(address in net for net in trusted):
            return client
    return client


MAX_HOPS = 20
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _is_trusted(address: str, trusted: tuple[IPNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


@functools.lru_cache(maxsize=8)
def _networks(values: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(v, strict=False) for v in values)


def retry_after(key: str, limit: int) -> int | None:
    """Count one request for ``key``; the seconds to wait when over ``limit`` per minute, else None."""
    if limit <= 0:
        return None
    now = time.time()
    window = int(now // WINDOW)
    try:
        count = count_hit(f"{key}:{window}")
    except Exception:  # a cache outage must not take the page down; the limiter fails open
        log.warning("rate limiter cache unavailable; letting %s through", key, exc_info=True)
        return None
    return None if count <= limit else max(1, math.ceil((window + 1) * WINDOW - now))


def count_hit(key: str, ttl: int = WINDOW * 2) -> int:
    """Add one to the cache counter ``key`` (created with ``ttl`` seconds to live); its new value."""
    if cache.add(key, 1, timeout=ttl):
        return 1
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=ttl)
        return 1
