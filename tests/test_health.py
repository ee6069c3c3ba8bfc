"""/healthz and /readyz: what a container probe sees, in-process and from a live gunicorn whose database
goes away and comes back."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test import Client

from packages_app.web import health
from tests.test_faults import (  # the live server behind a cuttable proxy to PostgreSQL
    AppServer,
    CuttableProxy,
    app_server,  # noqa: F401 (a fixture)
    db_proxy,  # noqa: F401 (a fixture)
    needs_services,
    wait_until,
)


@pytest.fixture
def probe_client(settings: Any) -> Client:
    """Production-like settings: HTTPS redirect on, only the public host name allowed, reading private."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["meshdash.example.org"]
    settings.MESHDASH_PUBLIC_READ = False
    settings.CELERY_BROKER_URL = ""
    return Client(HTTP_HOST="127.0.0.1")


@pytest.fixture
def forget_migrations() -> Iterator[None]:
    health._migrations_applied = False
    yield
    health._migrations_applied = False


def test_healthz_answers_a_plain_http_probe_on_an_unlisted_host_without_touching_the_database(
    probe_client: Client,
) -> None:
    response = probe_client.get("/healthz")  # no django_db mark: any query would raise
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_control_without_the_probe_middleware_the_same_probe_is_refused(
    probe_client: Client, settings: Any
) -> None:
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "packages_app.web.health.ProbeMiddleware"]
    assert probe_client.get("/healthz").status_code in (301, 400, 404)


@pytest.mark.django_db
def test_readyz_is_200_with_each_check_named_when_the_database_answers(
    probe_client: Client, forget_migrations: None
) -> None:
    response = probe_client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "migrations": "ok", "broker": "not configured"},
    }


@pytest.mark.django_db
def test_readyz_is_503_while_a_migration_is_pending(probe_client: Client, forget_migrations: None) -> None:
    pending = [(mock.Mock(name="0099_pending"), False)]
    with mock.patch.object(health.MigrationExecutor, "migration_plan", return_value=pending):
        response = probe_client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == "failing"
    assert int(response["Retry-After"]) > 0


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_does_not_answer_and_says_only_which_check_failed(
    probe_client: Client, settings: Any
) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # discard port: nothing listens
    started = time.monotonic()
    response = probe_client.get("/readyz")
    assert time.monotonic() - started < 5  # bounded by the broker timeout, never a hang
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["broker"] == "failing" and body["checks"]["database"] == "ok"
    assert "127.0.0.1:9" not in response.content.decode()  # the reason goes to the log, not to outsiders


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "ready"), [("amqp://127.0.0.1:9//", False), ("filesystem://", None)])
def test_readyz_checks_other_brokers_by_what_they_need(
    probe_client: Client, settings: Any, tmp_path: Any, url: str, ready: bool | None
) -> None:
    settings.CELERY_BROKER_URL = url
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "missing")}
    assert probe_client.get("/readyz").status_code == 503
    if url.startswith("filesystem"):
        (tmp_path / "missing").mkdir()
        assert probe_client.get("/readyz").json()["checks"]["broker"] == "ok"


@pytest.mark.cache
@pytest.mark.django_db
def test_readyz_is_200_with_the_suites_own_redis_broker(probe_client: Client, settings: Any) -> None:
    import os

    if not os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        pytest.skip("needs the services pass's Redis")
    settings.CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    assert probe_client.get("/readyz").json()["checks"]["broker"] == "ok"


def test_probes_refuse_other_methods(probe_client: Client) -> None:
    response = probe_client.post("/readyz")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_when_the_database_is_unreachable_and_200_again_once_it_is_back(
    probe_client: Client,
) -> None:
    saved = dict(connection.settings_dict)
    connection.close()
    # SQLite's in-memory test database is never really closed, so there the driver's error is raised for it.
    unreachable = (
        mock.patch.object(connection, "ensure_connection", side_effect=OperationalError("unable to open"))
        if connection.vendor == "sqlite"
        else mock.patch.dict(connection.settings_dict, {"HOST": "127.0.0.1", "PORT": "9"})
    )
    try:
        with unreachable:
            response = probe_client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"] == {
            "database": "failing",
            "migrations": "failing",
            "broker": "not configured",
        }
    finally:
        connection.close()
        connection.settings_dict.update(saved)
    assert probe_client.get("/readyz").status_code == 200


def readyz(server: AppServer) -> tuple[int, dict[str, Any]]:
    status, _, body = server.get("/readyz")
    return status, json.loads(body) if body else {}


@pytest.mark.serial
@pytest.mark.services
@needs_services
@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_a_live_gunicorn_readyz_goes_503_when_postgresql_is_cut_and_back_to_200(
    app_server: Callable[..., AppServer],  # noqa: F811 (the imported fixture)
    db_proxy: CuttableProxy,  # noqa: F811
    mode: str,
) -> None:
    server = app_server()
    assert readyz(server) == (200, {"status": "ok", "checks": mock.ANY})
    db_proxy.cut(mode)
    started = time.monotonic()
    status, body = readyz(server)
    assert (status, body["checks"]["database"]) == (503, "failing")
    assert time.monotonic() - started < 10  # the connect timeout (2 s here) ends a blackholed connect
    assert server.get("/healthz")[0] == 200  # the process itself is alive
    db_proxy.restore()
    assert wait_until(lambda: readyz(server)[0] == 200, 15)


# --- PostgreSQL black-holed (issue 48) ----------------------------------------------------------------


class _BlackHole:
    """A PostgreSQL host that is unreachable: connections are accepted and never answered."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for held in self.held:
            held.close()


class _PostgresSettings:
    """What ``connection`` gives the probe on PostgreSQL: the settings' connect timeout (5 s), no other."""

    vendor = "postgresql"

    def __init__(self, port: int) -> None:
        self.port = port

    def get_connection_params(self) -> dict[str, Any]:
        return {
            "dbname": "meshdash",
            "user": "meshdash",
            "host": "127.0.0.1",
            "port": self.port,
            "connect_timeout": 5,
        }


@pytest.fixture
def black_hole(monkeypatch: pytest.MonkeyPatch) -> Iterator[_BlackHole]:
    hole = _BlackHole()
    monkeypatch.setattr(health, "connection", _PostgresSettings(hole.port))
    yield hole
    hole.close()


def test_readyz_with_postgresql_black_holed_answers_503_in_about_two_seconds(
    probe_client: Client, black_hole: _BlackHole
) -> None:
    started = time.monotonic()
    response = probe_client.get("/readyz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503 and response.json()["checks"]["database"] == "failing"
    assert elapsed < health.READY_TIMEOUT + 1  # README: "a second or two"
    assert black_hole.held  # it did reach the black hole


def test_control_without_the_probes_timeouts_the_same_check_is_still_waiting_after_four_seconds(
    black_hole: _BlackHole, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    # The request's own connection, as before: no connect timeout on a connection already open (the
    # issue's 61.5 s was TCP giving up on one), here a fresh one with the probe's timeouts taken off.
    params = {
        k: v for k, v in health.probe_params().items() if k not in ("connect_timeout", "tcp_user_timeout")
    }  # type: ignore[union-attr]
    done = threading.Event()

    def check() -> None:
        with contextlib.suppress(psycopg.Error):
            psycopg.connect(**params).close()
        done.set()

    threading.Thread(target=check, daemon=True).start()
    assert not done.wait(4)  # still waiting on the black hole
    black_hole.close()
    assert done.wait(10)  # and ends only when the peer goes away
