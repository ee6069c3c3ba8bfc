"""``GET /metrics``: Prometheus text exposition of the processes' counters and the database's figures.

An edge, answered by health.ProbeMiddleware before host validation and the HTTPS redirect (Prometheus
scrapes a container by its service name over plain HTTP). Who may scrape: a request carrying
``Authorization: Bearer <MESHDASH_METRICS_TOKEN>``, or one from an address in
``MESHDASH_METRICS_ALLOWED_ADDRESSES`` (addresses or networks; default loopback only). Anything else
gets 401 (token) or 403 and no figure. A proxied request (it carries X-Forwarded-For, Forwarded or
X-Real-IP) is judged on the client a trusted proxy names (``MESHDASH_TRUSTED_PROXIES``), never on the
proxy's own address: behind the README's nginx on loopback every visitor's peer is 127.0.0.1 (issue 48:
``/metrics`` answered 200 to anyone through nginx with the token set).

The counters come from every process writing to ``PROMETHEUS_MULTIPROC_DIR`` (packages_app/metrics.py),
added up here; the gauges are read from the database (monitoring.current_figures), cached for
``MESHDASH_METRICS_CACHE_SECONDS`` in the shared cache so several scrapers cost one read.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from packages_app import metrics, monitoring, queueing
from packages_app.web import ratelimit

log = logging.getLogger(__name__)

# v2: the cached object is pickled by its class path, monitoring.DatabaseGauges (v1 held monitoring.Figures)
FIGURES_KEY = "meshdash:metrics:figures:v2"


def metrics_view(request: HttpRequest) -> HttpResponse:
    refusal = scrape_refusal(request)
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    if metrics.MULTIPROCESS_DIR:
        multiprocess.MultiProcessCollector(registry, path=metrics.MULTIPROCESS_DIR)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector())
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response


def scrape_refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may scrape; else the 401/403 to answer."""
    token = settings.MESHDASH_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    address = scraper_address(request)
    if address is not None and address_allowed(address, settings.MESHDASH_METRICS_ALLOWED_ADDRESSES):
        return None
    if token:
        response = JsonResponse({"error": "A valid metrics token is required (Bearer)."}, status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    return JsonResponse({"error": "This address may not read the metrics."}, status=403)


FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def scraper_address(request: HttpRequest) -> str | None:
    """The address the allowance is judged on: the peer, or for a proxied request the client a trusted
    proxy named; None (token only) for a proxied request no trusted proxy resolved to another address."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    if not any(request.META.get(header) for header in FORWARDING_HEADERS):
        return peer
    client = ratelimit.client_address(request)
    return client if client != peer else None


def address_allowed(address: str, allowed: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(network, strict=False) for network in allowed)


class _ThisProcess(Collector):
    """The default registry (this process's counters, and its process_* and python_* figures)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time; ``meshdash_database_up`` 0 when it cannot be read."""

    def collect(self) -> Iterator[Metric]:
        figures = cached_figures()
        yield _gauge(
            "meshdash_database_up", "1 when the scrape could read the database.", figures is not None
        )
        if figures is not None:
            yield from figure_metrics(figures)


def cached_figures() -> monitoring.DatabaseGauges | None:
    """The database's figures, from the shared cache when it holds them; with the cache (Redis) down they
    are read from the database for this scrape (issue 48: /metrics answered 500 with Redis down)."""
    seconds = settings.MESHDASH_METRICS_CACHE_SECONDS
    try:
        figures = cache.get(FIGURES_KEY) if seconds > 0 else None
    except queueing.BROKER_DOWN as exc:
        log.warning("/metrics could not read the cache: %s", exc)
        figures, seconds = None, 0
    if isinstance(figures, monitoring.DatabaseGauges):
        return figures
    try:
        figures = monitoring.current_figures()
    except DatabaseError as exc:
        log.warning("/metrics could not read the database: %s", exc)
        return None
    if seconds > 0:
        with contextlib.suppress(*queueing.BROKER_DOWN):
            cache.set(FIGURES_KEY, figures, seconds)
    return figures


def figure_metrics(f: monitoring.DatabaseGauges) -> Iterator[Metric]:
    queue = GaugeMetricFamily(
        "meshdash_ingest_queue_revisions", "Revisions waiting for or in ingest, by state.", labels=["state"]
    )
    queue.add_metric(["queued"], f.queued)
    queue.add_metric(["running"], f.running)
    yield queue
    yield _gauge(
        "meshdash_ingest_oldest_queued_seconds",
        "Age of the oldest revision still queued for ingest (0 when none waits).",
        f.oldest_queued_age,
    )
    yield _by("meshdash_revisions", "Stored revisions by headline status.", "status", f.revisions)
    yield _by(
        "meshdash_latest_revisions",
        "Tracked packages' latest revisions by headline status.",
        "status",
        f.latest_revisions,
    )
    yield _by(
        "meshdash_served_revisions",
        "Revisions some node reported serving in the last hour, by headline status.",
        "status",
        f.served,
    )
    yield _gauge("meshdash_nodes_seen", "Nodes that called the API in the last hour.", f.nodes_seen)
    yield _gauge(
        "meshdash_nodes_silent",
        "Nodes that called the API in the last day but not in the last 15 minutes.",
        f.nodes_silent,
    )
    yield _by(
        "meshdash_nodes_needing_action",
        "Nodes whose most urgent advice needs action, by cause (the fleet window).",
        "cause",
        f.nodes_needing_action,
    )
    yield _gauge(
        "meshdash_rollup_lag_seconds",
        "How far the rollups trail the newest report linked to a revision.",
        f.rollup_lag,
    )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _by(name: str, documentation: str, label: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(counts.items()):
        family.add_metric([key], value)
    return family
