"""The Prometheus counters and histograms the processes move (prometheus_client); no Django, no I/O.

Every label takes its values from a short closed list (the ``*_LABELS`` tuples below, or HTTP status
codes): no repo, revision or node name is ever a label, so the number of series stays fixed whatever
the fleet or the catalog grows to. What the database knows (queue depth, revisions by headline, nodes)
is read at scrape time by packages_app/web/metrics_view.py (with monitoring.py), not counted here.

Multiprocess mode: with ``PROMETHEUS_MULTIPROC_DIR`` set (before this module is imported), each process
(gunicorn worker, Celery worker child, the OTLP/gRPC receiver) writes its values to files in that folder,
named by host name and pid, so containers sharing the folder never share a file; ``/metrics`` on any
web worker adds them up. Without it, each process counts in memory and ``/metrics`` shows its own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Histogram, values

MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def _process_identifier() -> str:
    # Pids repeat across containers (each starts at 1), and the folder may be a volume they share.
    return f"{socket.gethostname()}_{os.getpid()}"


def value_class(environ: Mapping[str, str]) -> Any:
    """How this process keeps its values: in files of the multiprocess folder (created if need be), named by
    host and pid; in memory when the setting is set but empty (prometheus_client would write its files into
    the working folder); else as prometheus_client chose."""
    folder = environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if folder:
        os.makedirs(folder, exist_ok=True)
        return values.MultiProcessValue(process_identifier=_process_identifier)  # type: ignore[no-untyped-call]
    if "PROMETHEUS_MULTIPROC_DIR" in environ:
        return values.MutexValue
    return values.ValueClass


values.ValueClass = value_class(os.environ)

INGEST_OUTCOMES = (
    "done",
    "failed",
    "skipped",
    "unconfirmed",
    "timed-out",
    "retry-hub",
    "retry-database",
    "other",
)
HUB_KINDS = ("api", "file-range", "file", "other")
REPORT_OUTCOMES = ("created", "duplicate", "conflict", "invalid")
REFUSAL_REASONS = (
    "method",
    "unauthorized",
    "rate-limited",
    "too-large",
    "not-json",
    "invalid",
    "conflict",
    "deadline",
    "error",
)
REPORT_SOURCES = ("report", "otlp", "runs", "baseline")
NOTIFICATION_OUTCOMES = ("sent", "failed", "retry", "refused")

INGESTS = Counter(
    "meshdash_ingests",
    "Revision ingest task runs, by outcome (retry-* = the task was rescheduled).",
    ["outcome"],
)
HUB_REQUESTS = Counter(
    "meshdash_hub_requests",
    "HTTP requests to the Hub, by kind and status class (2xx, 3xx, 4xx, 429, 5xx).",
    ["kind", "status"],
)
HUB_SECONDS = Histogram(
    "meshdash_hub_request_seconds",
    "Time from sending a Hub request to its response headers, by kind.",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
HUB_ERRORS = Counter(
    "meshdash_hub_errors",
    "Hub calls that ended in an error, by error kind (unavailable, not-found, refused, ...).",
    ["error"],
)
REPORTS = Counter(
    "meshdash_reports",
    "Node reports (REST reports and OTLP decode spans) received, by source and outcome.",
    ["source", "outcome"],
)
REFUSED = Counter(
    "meshdash_report_requests_refused",
    "Report and OTLP requests refused before storing anything, by source and reason.",
    ["source", "reason"],
)
NOTIFICATIONS = Counter(
    "meshdash_notifications",
    "Notification deliveries, by channel (webhook, slack, email) and outcome.",
    ["channel", "outcome"],
)


def bounded(value: str, allowed: tuple[str, ...], fallback: str = "other") -> str:
    """``value`` if it is one of ``allowed``, else ``fallback``: a label never takes an open value."""
    return value if value in allowed else fallback


def count_ingest(outcome: str) -> str:
    INGESTS.labels(bounded(outcome, INGEST_OUTCOMES)).inc()
    return outcome


def count_reports(source: str, outcome: str, n: int = 1) -> None:
    if n > 0:
        REPORTS.labels(bounded(source, REPORT_SOURCES), bounded(outcome, REPORT_OUTCOMES, "invalid")).inc(n)


def count_refused(source: str, reason: str) -> None:
    REFUSED.labels(bounded(source, REPORT_SOURCES), bounded(reason, REFUSAL_REASONS, "error")).inc()


def status_class(status: int) -> str:
    """429 on its own (the Hub's rate limit), else the class: 2xx, 3xx, 4xx, 5xx."""
    if status == 429:
        return "429"
    return f"{min(max(status // 100, 1), 5)}xx"


def hub_kind(path: str, ranged: bool) -> str:
    if path.startswith("/api/"):
        return "api"
    if "/resolve/" in path or "/xet" in path or ranged:
        return "file-range" if ranged else "file"
    return "other"
