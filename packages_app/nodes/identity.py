"""Services for serving-node credentials: create, hash, verify, revoke and rotate tokens.

A token is shown once, when made; only its SHA-256 digest is stored. A fast hash is right here
because tokens are 32 random bytes from `secrets`, so there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from packages_app.models import Node

TOKEN_PREFIX = "mdn_"  # noqa: S105 - a label that makes leaked tokens greppable, not a secret
PREFIX_CHARS = 12
LAST_SEEN_RESOLUTION = timedelta(minutes=1)  # one write a minute per node, not one per report
RATE_WINDOW = 60  # seconds

log = logging.getLogger(__name__)


class NodeError(ValueError):
    """A node operation that cannot be done, with a sentence an operator can act on."""


@dataclass(frozen=True)
class IssuedToken:
    node: Node
    token: str  # the only time the plain token exists; never stored, never logged


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create_node(name: str) -> IssuedToken:
    name = name.strip()
    if not name or len(name) > 100:
        raise NodeError("A node name must be 1 to 100 characters.")
    token = new_token()
    try:
        with transaction.atomic():
            node = Node.objects.create(
                name=name, token_hash=hash_token(token), token_prefix=token[:PREFIX_CHARS]
            )
    except IntegrityError:
        raise NodeError(f"A node named {name!r} already exists; rotate its token instead.") from None
    return IssuedToken(node=node, token=token)


def rotate_node_token(node: Node) -> IssuedToken:
    """Give the node a fresh token; the old one stops working at once. Also un-revokes it."""
    token = new_token()
    node.token_hash = hash_token(token)
    node.token_prefix = token[:PREFIX_CHARS]
    node.revoked_at = None
    node.save(update_fields=["token_hash", "token_prefix", "revoked_at"])
    return IssuedToken(node=node, token=token)


def revoke_node(node: Node) -> None:
    if node.revoked_at is None:
        node.revoked_at = timezone.now()
        node.save(update_fields=["revoked_at"])


def get_node(name: str) -> Node:
    try:
        return Node.objects.get(name=name)
    except Node.DoesNotExist:
        raise NodeError(f"No node is named {name!r}.") from None


def authenticate_node(token: str) -> Node | None:
    """The active node holding this token, or None. The digest compare is constant-time."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    node = Node.objects.filter(token_hash=digest, revoked_at__isnull=True).first()
    if node is None or not hmac.compare_digest(node.token_hash, digest):
        return None
    return node


def touch_node(node: Node) -> None:
    """Record that the node was seen, at most once a minute."""
    now = timezone.now()
    if node.last_seen_at is None or now - node.last_seen_at >= LAST_SEEN_RESOLUTION:
        Node.objects.filter(pk=node.pk).update(last_seen_at=now)
        node.last_seen_at = now


def count_node_request(node: Node) -> int | None:
    """Count one request in the node's fixed one-minute window; seconds to wait if over the limit.

    The count lives in the Django cache, so it is shared by all web workers when the cache is
    Redis (settings.CACHES); with the local-memory default each process counts on its own.
    """
    limit = node.rate_limit_per_minute or settings.MESHDASH_NODE_RATE_LIMIT
    return _over_limit(f"meshdash:rate:{node.pk}", limit, 1)


def count_node_spans(node: Node, spans: int) -> int | None:
    """Count an export's spans in the node's one-minute span budget (MESHDASH_NODE_SPAN_RATE_LIMIT);
    seconds to wait if over it. One request may carry thousands of spans: they are what costs."""
    return _over_limit(f"meshdash:spans:{node.pk}", settings.MESHDASH_NODE_SPAN_RATE_LIMIT, spans)


def _over_limit(prefix: str, limit: int, cost: int) -> int | None:
    if limit <= 0 or cost <= 0:
        return None
    now = time.time()
    window = int(now // RATE_WINDOW)
    key = f"{prefix}:{window}"
    try:
        count = _count_request(key, cost)
    except Exception:  # a cache outage must not stop reports; the limiter fails open
        log.warning("rate limiter cache unavailable; letting %s through", prefix, exc_info=True)
        return None
    if count <= limit:
        return None
    return max(1, math.ceil((window + 1) * RATE_WINDOW - now))


def _count_request(key: str, cost: int = 1) -> int:
    # incr first: the window's key exists for all but its first request, so this is the cheap path.
    try:
        return int(cache.incr(key, cost))
    except ValueError:
        if cache.add(key, cost, RATE_WINDOW * 2):
            return cost
        return int(cache.incr(key, cost))  # another worker opened the window between our two calls
