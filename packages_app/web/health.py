"""Liveness and readiness probes: ``/healthz`` (the process answers) and ``/readyz`` (it can do its work).

An edge, answered by ``ProbeMiddleware`` at the top of the middleware stack, before host validation,
the HTTPS redirect, sessions and the login rule: a container probe on 127.0.0.1 over plain HTTP must get
the answer, not a 400 for an unlisted Host or a 301 to https. Both are unauthenticated and say nothing
an outsider could use (which check failed, never why: the reason goes to the log).

Readiness: the database answers ``SELECT 1``, no migration is pending (remembered once true: migrations
are not un-applied under a running process), and the broker accepts a connection when one is configured.
Each check is bounded by a timeout of a second or two, so a probe never hangs on a dead dependency: on
PostgreSQL the database check opens a connection of its own with ``READY_TIMEOUT`` as libpq's connect
timeout, its TCP user timeout and the statement timeout (issue 48: with the server black-holed, ``SELECT 1``
on the request's persistent connection waited 61.5 s for TCP to give up; now the probe answers 503 in
about 2 s).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

from packages_app.web.metrics_view import metrics_view

log = logging.getLogger(__name__)

GetResponse = Callable[[HttpRequest], HttpResponse]
BROKER_TIMEOUT = 1.5  # seconds, connect and answer
READY_TIMEOUT = 2  # seconds: the database probe's connect (libpq's minimum), TCP and statement timeouts

_migrations_applied = False


def check_database() -> bool:
    params = probe_params()
    if params is not None:
        return _postgresql_answers(params)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        log.warning("readyz: database unreachable: %s", exc)
        return False
    return True


def probe_params() -> dict[str, Any] | None:
    """The probe's own connection to PostgreSQL (the settings' with short timeouts), or None on another
    database (SQLite: a file, nothing to wait for)."""
    if connection.vendor != "postgresql":
        return None
    params = dict(connection.get_connection_params())
    params["connect_timeout"] = READY_TIMEOUT
    params["tcp_user_timeout"] = READY_TIMEOUT * 1000  # unacknowledged data: the server is gone
    params["options"] = f"{params.get('options', '')} -c statement_timeout={READY_TIMEOUT * 1000}".strip()
    return params


def _postgresql_answers(params: dict[str, Any]) -> bool:
    import psycopg

    try:
        with psycopg.connect(**params) as probe:
            probe.execute("SELECT 1").fetchone()
    except psycopg.Error as exc:
        log.warning("readyz: database unreachable: %s", exc)
        return False
    return True


def check_migrations() -> bool:
    global _migrations_applied
    if _migrations_applied:
        return True
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        log.warning("readyz: could not read the applied migrations: %s", exc)
        return False
    if pending:
        log.warning("readyz: %d migrations not applied (first: %s)", len(pending), pending[0][0])
        return False
    _migrations_applied = True
    return True


def check_broker() -> bool | None:
    """True/False when a broker is configured, None when tasks run eagerly in-process (nothing to reach)."""
    url = settings.CELERY_BROKER_URL
    if not url:
        return None
    scheme = urlsplit(url).scheme
    if scheme.startswith("redis"):
        return _redis_answers(url)
    if scheme == "filesystem":
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_in", "")
        return isinstance(folder, str) and Path(folder).is_dir()
    return _tcp_connects(url)


def _redis_answers(url: str) -> bool:
    from redis import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(url, socket_timeout=BROKER_TIMEOUT, socket_connect_timeout=BROKER_TIMEOUT)
    try:
        return bool(client.ping())
    except (RedisError, OSError) as exc:
        log.warning("readyz: broker unreachable: %s", exc)
        return False
    finally:
        client.close()


def _tcp_connects(url: str) -> bool:
    """Another transport (amqp://...): its server accepts a TCP connection."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), BROKER_TIMEOUT):
            return True
    except OSError as exc:
        log.warning("readyz: broker unreachable: %s", exc)
        return False


def healthz(request: HttpRequest) -> HttpResponse:
    return _no_store(JsonResponse({"status": "ok"}))


def readyz(request: HttpRequest) -> HttpResponse:
    database = check_database()
    checks = {
        "database": database,
        "migrations": database and check_migrations(),
        "broker": check_broker(),
    }
    ready = all(value is not False for value in checks.values())
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {name: _word(value) for name, value in checks.items()},
    }
    response = JsonResponse(body, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = str(settings.MESHDASH_DB_RETRY_AFTER)
    return _no_store(response)


def _word(value: bool | None) -> str:
    return "not configured" if value is None else ("ok" if value else "failing")


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics_view,  # token- or address-protected, see metrics_view.py
}


class ProbeMiddleware:
    """Answers GET/HEAD /healthz, /readyz and /metrics itself; every other request goes down the stack."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return JsonResponse({"error": "Use GET."}, status=405, headers={"Allow": "GET, HEAD"})
        return probe(request)
