"""Fault tolerance: what survives a killed worker, a restarted broker, a database outage, Hub rate limits
and poison messages.

The first part runs anywhere (eager tasks, in-process middleware). The second starts real processes on
loopback - Celery workers, a test-owned redis-server, a gunicorn app server behind a cuttable TCP proxy to
PostgreSQL - and every scenario there has a negative control: the same fault with the protection turned
off loses the work or fails the request, which shows the positive test can fail.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.db import IntegrityError, InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from meshdash.middleware import DatabaseUnavailableMiddleware
from packages_app import hub, ingest, inspection, tasks
from packages_app.devhub import DEMO_PACKAGES, LLAMA_REPO, QWEN35_FIRST_SHA, QWEN35_REPO, DevHub, FaultPlan
from packages_app.devhub.generator import GLM53_REPO
from packages_app.models import Package, PackageFile, Report, Revision
from packages_app.nodes import identity as nodes

ROOT = Path(__file__).resolve().parent.parent
# Workers, redis-servers and gunicorn on time limits of seconds: one test at a time, and in the services pass
# alone, after the others (make test-services), so that no other test competes with them for the cores.
pytestmark = pytest.mark.serial

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
QWEN_LAYERS = 41
NON_GGUF_FILES = 3  # .gitattributes, README.md, model-package.json


# ===================================================================================================
# In-process: the middleware, the time limit, quarantine, no retry for parse errors, the reconciler
# ===================================================================================================


def failing_view(exc: Exception) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        raise exc

    return view


@pytest.mark.parametrize(
    "exc",
    [OperationalError("server closed the connection"), InterfaceError("connection already closed")],
    ids=["operational", "interface"],
)
def test_a_database_outage_under_api_answers_json_503_with_retry_after(exc: Exception, settings: Any) -> None:
    settings.MESHDASH_DB_RETRY_AFTER = 7
    request = RequestFactory().post("/api/v1/reports")
    response = DatabaseUnavailableMiddleware(failing_view(exc)).process_exception(request, exc)
    assert response is not None and response.status_code == 503
    assert response["Retry-After"] == "7" and json.loads(response.content)["error"].startswith("The database")


def test_a_database_outage_on_a_page_answers_a_short_html_503() -> None:
    exc = OperationalError("connection refused")
    response = DatabaseUnavailableMiddleware(failing_view(exc)).process_exception(
        RequestFactory().get("/"), exc
    )
    assert response is not None and response.status_code == 503
    assert response["Content-Type"].startswith("text/html") and b"Temporarily unavailable" in response.content


def test_other_database_errors_are_not_disguised_as_an_outage() -> None:
    exc = IntegrityError("duplicate key")
    assert (
        DatabaseUnavailableMiddleware(failing_view(exc)).process_exception(RequestFactory().get("/"), exc)
        is None
    )


@pytest.mark.django_db
def test_the_report_api_answers_503_not_its_own_500_when_the_database_drops(client: Client) -> None:
    token = nodes.create_node("node-a").token
    with mock.patch.object(
        nodes, "authenticate_node", side_effect=OperationalError("terminating connection")
    ):
        response = client.post(
            "/api/v1/reports",
            data="{}",
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert response.json() == {"error": "The database is unavailable; try again shortly."}


@pytest.mark.django_db
def test_an_ingest_stopped_by_the_soft_time_limit_is_left_queued_with_a_message(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspection, "fetch_package_headers", mock.Mock(side_effect=SoftTimeLimitExceeded()))
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    assert result.get() == "timed-out"
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert rev.status == Revision.Status.QUEUED and rev.attempts == 1
    assert rev.error.startswith("stopped by the 600 s time limit on attempt 1; queued again")


@pytest.mark.django_db
def test_an_ingest_stopped_by_the_time_limit_every_time_is_failed_for_good(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspection, "fetch_package_headers", mock.Mock(side_effect=SoftTimeLimitExceeded()))
    for _ in range(tasks.MAX_DELIVERIES):
        tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert rev.status == Revision.Status.FAILED and "not retried" in rev.error


@pytest.mark.django_db
def test_a_message_whose_deliveries_died_three_times_is_quarantined_without_running(
    hub_settings: DevHub, eager_tasks: None
) -> None:
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA)
    task_id = str(uuid.uuid4())
    for _ in range(3):  # three deliveries that started and never finished (their worker died)
        tasks.count_delivery(f"meshdash:deliveries:{tasks.ingest_revision_task.name}:{task_id}")
    hub_settings.counters.reset()
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA), task_id=task_id)
    assert result.get() == tasks.QUARANTINED
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert (rev.status, rev.error) == ("failed", "quarantined after 3 deliveries that never finished")
    assert hub_settings.counters.requests == 0 and rev.attempts == 0


@pytest.mark.django_db
def test_two_dead_deliveries_are_not_yet_quarantined(hub_settings: DevHub, eager_tasks: None) -> None:
    task_id = str(uuid.uuid4())
    for _ in range(2):
        tasks.count_delivery(f"meshdash:deliveries:{tasks.ingest_revision_task.name}:{task_id}")
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA), task_id=task_id)
    assert result.get() == Revision.Status.DONE


@pytest.mark.django_db
def test_a_finished_or_retried_delivery_is_not_counted_as_dead(
    hub_settings: DevHub, eager_tasks: None
) -> None:
    task_id = str(uuid.uuid4())
    for _ in range(5):
        tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA), task_id=task_id)
    assert tasks.count_delivery(f"meshdash:deliveries:{tasks.ingest_revision_task.name}:{task_id}") == 0


@pytest.mark.django_db
def test_a_delivery_ended_by_the_hard_time_limit_counts_as_dead(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Billiard sends SIGTERM before SIGKILL to a child past the hard limit; that SystemExit must not
    # look like a finished delivery, or a message that hangs its worker would never be quarantined.
    monkeypatch.setattr(ingest, "ingest_revision", mock.Mock(side_effect=SystemExit(1)))
    task_id = str(uuid.uuid4())
    with pytest.raises(SystemExit):
        tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA), task_id=task_id)
    assert tasks.count_delivery(f"meshdash:deliveries:{tasks.ingest_revision_task.name}:{task_id}") == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "manifest", [b"{not json", b"\xff\xfe\x00", b"[" * 50_000 + b"]" * 50_000], ids=["json", "utf8", "deep"]
)
def test_a_malformed_manifest_fails_once_and_is_not_retried(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch, manifest: bytes
) -> None:
    monkeypatch.setattr(hub.HubSource, "read_manifest", lambda self, sha: manifest)
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert result.state == "SUCCESS" and result.get() == "failed"
    assert rev.attempts == 1 and rev.status == "failed" and "model-package.json" in rev.error


@pytest.mark.django_db
def test_a_hostile_gguf_header_fails_its_file_not_the_task_and_is_not_retried(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = hub.HubSource.read_range

    def corrupt(self: hub.HubSource, sha: str, path: str, start: int, length: int) -> bytes:
        data = original(self, sha, path, start, length)
        return b"GGUF\x03\x00\x00\x00" + b"\xff" * 16 + data[24:] if path.endswith("layer-007.gguf") else data

    monkeypatch.setattr(hub.HubSource, "read_range", corrupt)
    assert tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA)).get() == "done"
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    bad = rev.files.get(path__endswith="layer-007.gguf")
    assert rev.attempts == 1 and bad.header_status == "failed" and bad.header_error


def test_celery_is_configured_to_lose_nothing() -> None:
    from meshdash.celery import app

    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.task_acks_on_timeout is False
    assert conf.worker_prefetch_multiplier == 1
    visibility = conf.broker_transport_options["visibility_timeout"]
    assert 0 < conf.task_soft_time_limit < conf.task_time_limit < visibility
    for name in ("ingest_revision", "sync_package", "discover_packages"):
        task = app.tasks[f"packages_app.tasks.{name}"]
        assert task.acks_late and task.reject_on_worker_lost and task.acks_on_timeout is False


def test_beat_schedules_the_reconciler_of_stuck_revisions(settings: Any) -> None:
    from meshdash.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["reconcile-stuck-revisions"]
    assert entry["task"] == "packages_app.tasks.reconcile_stuck_revisions" and 0 < entry["schedule"] <= 900
    assert entry["task"] in app.tasks


@pytest.mark.django_db
def test_the_reconciler_finishes_a_revision_whose_worker_died_past_its_lease(
    hub_settings: DevHub, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    stuck = stuck_revision(started=datetime.now(UTC) - ingest.STALE_CLAIM - timedelta(seconds=1))
    fresh = stuck_revision(QWEN35_REPO, DEMO_PACKAGES[0].revisions[1].sha, started=datetime.now(UTC))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.reconcile_stuck_revisions.apply().get() == 1
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert stuck.status == "done" and stuck.files.filter(role="layer").count() == QWEN_LAYERS
    assert fresh.status == "running", "a revision inside its lease belongs to a live worker"


def stuck_revision(repo_id: str = QWEN35_REPO, sha: str = QWEN35_FIRST_SHA, *, started: datetime) -> Revision:
    package, _ = Package.objects.get_or_create(repo_id=repo_id, defaults={"private": False})
    return Revision.objects.create(
        package=package, commit_sha=sha, status="running", claim_token="dead-worker", started_at=started
    )


# ===================================================================================================
# Real processes on loopback
# ===================================================================================================

needs_services = pytest.mark.skipif(
    not os.environ.get("CELERY_BROKER_URL")
    or connection.vendor != "postgresql"
    or not Path(REDIS_SERVER).exists(),
    reason="needs CELERY_BROKER_URL, a PostgreSQL DATABASE_URL and redis-server (make test-services)",
)
# Short limits so a redelivery happens within the test: visibility > hard > soft > one slowed ingest.
SOFT_LIMIT, HARD_LIMIT, VISIBILITY = 12, 14, 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    """True as soon as `predicate` holds. A wait for an outcome is generous (it returns the moment the work is
    done, and a busy machine slows the work); a wait that shows nothing happens
    (`assert not wait_until(...)`) is as long as the claim needs, no longer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def database_url(port: int | None = None) -> str:
    s = connection.settings_dict
    auth = s["USER"] or "postgres"
    if s["PASSWORD"]:
        auth += f":{s['PASSWORD']}"
    host = "127.0.0.1" if port else s["HOST"] or "127.0.0.1"
    return f"postgres://{auth}@{host}:{port or s['PORT'] or 5432}/{s['NAME']}"


# --- a test-owned redis-server ---------------------------------------------------------------------


class RedisServer:
    """/usr/bin/redis-server on a free loopback port: the production flags, optionally without persistence."""

    def __init__(self, workdir: Path, persistent: bool = True) -> None:
        self.workdir, self.persistent, self.port = workdir, persistent, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        persistence = ["--appendonly", "yes"] if self.persistent else ["--appendonly", "no"]
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        argv += [*persistence, "--save", "", "--maxmemory-policy", "noeviction"]
        argv += ["--logfile", str(self.workdir / "redis.log")]
        self.proc = subprocess.Popen(argv, start_new_session=True)
        assert wait_until(self.ping, 10), "redis-server did not start"
        return self

    def client(self) -> Any:
        import redis

        return redis.Redis(port=self.port, socket_timeout=2)

    def ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def restart(self) -> None:
        """What `docker compose restart redis` does: SIGTERM (Redis flushes its AOF), then start again."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def send(broker_url: str, name: str, *args: str) -> str:
    """Enqueue on the test-owned broker (this process's Celery app is bound to the suite's Redis)."""
    from meshdash.celery import app

    # No time limits in the message: a publisher's limits (this process has the 600/660 s defaults)
    # would override the worker's short test limits.
    with app.connection_for_write(broker_url) as conn:
        result = app.send_task(name, args=list(args), connection=conn, time_limit=None, soft_time_limit=None)
    return str(result.id)


INGEST = "packages_app.tasks.ingest_revision"


# --- a devhub that can be slowed and records what it answered --------------------------------------


class RecordingFaults(FaultPlan):
    """devhub's fault plan plus a delay per resolve request and a log of manifest requests."""

    def __init__(self, resolve_delay: float = 0.0) -> None:
        super().__init__()
        self.resolve_delay = resolve_delay
        self.manifest_requests: list[tuple[float, int]] = []

    def take(self, path: str) -> Any:
        if self.resolve_delay and "/resolve/" in path:
            time.sleep(self.resolve_delay)
        fault = super().take(path)
        if path.endswith("/model-package.json"):
            self.manifest_requests.append((time.monotonic(), fault.status if fault else 200))
        return fault


@pytest.fixture
def faults() -> RecordingFaults:
    return RecordingFaults()


@pytest.fixture
def slow_hub(demo_catalog: Path, faults: RecordingFaults) -> Iterator[DevHub]:
    server = DevHub(demo_catalog, faults=faults).start()
    yield server
    server.stop()


# --- Celery workers with test knobs ----------------------------------------------------------------

# Runs in the worker's main process before it forks its pool, so the children inherit every knob.
WORKER_SCRIPT = r"""
import json, os, signal, sys, time
knobs = json.loads(os.environ["MESHDASH_FAULT_KNOBS"])
import django
django.setup()
from meshdash.celery import app
from packages_app import hub, ingest, tasks

# Sweep for unacknowledged messages every second, so a redelivery comes right after the visibility timeout.
app.conf.broker_transport_options = {
    **app.conf.broker_transport_options, "unacked_restore_interval": 1, "unacked_restore_throttle": 1
}
# Notice a pool child killed mid-task after 1 s instead of 10 (the default waits for a late result).
app.conf.worker_lost_wait = 1.0
if knobs.get("stock_redis_transport"):  # kombu's own Redis transport, without meshdash.broker's fix
    app.conf.broker_transport = None
if knobs.get("no_db_retry"):  # database errors fail the task, as before they were retried
    tasks.DATABASE_ERRORS = ()
if "acks_late" in knobs:
    app.tasks[tasks.ingest_revision_task.name].acks_late = knobs["acks_late"]
if "max_deliveries" in knobs:
    tasks.MAX_DELIVERIES = knobs["max_deliveries"]
if knobs.get("ignore_retry_after"):
    tasks.retry_countdown = lambda exc, retries: 0.2
if "hub_client_retries" in knobs:
    original_init = hub.HubSource.__init__
    def init(self, repo_id, **kwargs):
        kwargs["max_retries"] = knobs["hub_client_retries"]
        original_init(self, repo_id, **kwargs)
    hub.HubSource.__init__ = init
if "poison_repo" in knobs:
    original_ingest = ingest.ingest_revision
    def poisoned(repo_id, *args, **kwargs):
        if repo_id == knobs["poison_repo"]:
            with open(knobs["poison_log"], "a") as log:
                log.write(f"{os.getpid()}\n")
            if knobs.get("poison") == "hang":  # ignores the soft limit: only the hard limit ends it
                from celery.exceptions import SoftTimeLimitExceeded
                while True:
                    try:
                        time.sleep(60)
                    except SoftTimeLimitExceeded:
                        pass
            os.kill(os.getpid(), signal.SIGKILL)  # a message that kills whichever process runs it
        return original_ingest(repo_id, *args, **kwargs)
    ingest.ingest_revision = poisoned
app.worker_main(["worker", "-c", str(knobs.get("concurrency", 1)), "--loglevel=INFO", "-n", knobs["name"],
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-P", "prefork"])
"""


@dataclass
class Worker:
    """A Celery worker process group on the test database, the test broker and the test devhub."""

    broker: RedisServer
    hub_url: str
    log_path: Path
    knobs: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    limits: tuple[int, int, int] = (SOFT_LIMIT, HARD_LIMIT, VISIBILITY)

    def start(self) -> Worker:
        knobs = {"name": f"fault-{uuid.uuid4().hex[:8]}@%h", **self.knobs}
        env = {k: v for k, v in os.environ.items() if k not in ("CACHE_URL", "DEBUG")}
        env |= {
            "DATABASE_URL": database_url(self.knobs.get("db_port")),
            "CELERY_BROKER_URL": self.broker.url,
            "REDIS_URL": self.broker.url.replace("/0", "/1"),
            "HF_ENDPOINT": self.hub_url,
            "CELERY_TASK_SOFT_TIME_LIMIT": str(self.limits[0]),
            "CELERY_TASK_TIME_LIMIT": str(self.limits[1]),
            "CELERY_VISIBILITY_TIMEOUT": str(self.limits[2]),
            "MESHDASH_FETCH_CONCURRENCY": "2",
            "MESHDASH_FAULT_KNOBS": json.dumps(knobs),
        }
        offset = self.log_path.stat().st_size
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: SIGKILL reaches the pool children too
            )
        assert wait_until(lambda: " ready." in self.log()[offset:], 30), self.log()[-3000:]
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_hard(self) -> None:
        """SIGKILL to the whole group: main process and pool children die at once, no shutdown at all."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def make_worker(
    broker: RedisServer, slow_hub: DevHub, tmp_path: Path, transactional_db: None
) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []
    log_path = tmp_path / "worker.log"  # pytest keeps the last runs' tmp folders for a post-mortem
    log_path.write_text("")

    def make(**knobs: Any) -> Worker:
        worker = Worker(broker, slow_hub.url, log_path, knobs)
        workers.append(worker)
        return worker

    yield make
    # The test is over, and its broker (its own redis-server) and database rows go with it: no warm shutdown,
    # which cost about 1.5 s in each of the 12 tests that left one running (about 17 s of the serial pass).
    for worker in workers:
        if worker.proc is not None and worker.proc.poll() is None:
            worker.kill_hard()


def qwen_revision() -> Revision | None:
    return Revision.objects.filter(commit_sha=QWEN35_FIRST_SHA).first()


def killed_mid_ingest(worker: Worker, faults: RecordingFaults) -> tuple[int, int]:
    """Start the Qwen3.5 ingest, SIGKILL the worker once some layers are in; (files done, files total)."""
    faults.resolve_delay = 0.1  # ~46 ranged reads: the ingest takes a few seconds instead of one
    worker.start()
    send(worker.broker.url, INGEST, QWEN35_REPO, QWEN35_FIRST_SHA)

    def some_layers_in() -> bool:
        rev = qwen_revision()
        return rev is not None and rev.status == "running" and rev.files_done >= 6

    assert wait_until(some_layers_in, 30), worker.log()[-3000:]
    worker.kill_hard()
    rev = qwen_revision()
    assert rev is not None and rev.status == "running"
    return rev.files_done, rev.files_total


def qwen_done() -> bool:
    rev = qwen_revision()
    return rev is not None and rev.status == "done"


def assert_ingested_exactly_once(rev: Revision) -> None:
    assert rev.status == "done" and rev.verdict == "undeclared-mtp" and rev.audited_at is not None
    assert PackageFile.objects.filter(revision=rev, role="layer").count() == QWEN_LAYERS
    assert rev.files.count() == rev.files_total + NON_GGUF_FILES
    assert rev.files_done == rev.files_total, "every header counted once, by one complete run"
    assert Revision.objects.filter(package__repo_id=QWEN35_REPO).count() == 1


@pytest.mark.services
@needs_services
def test_a_worker_killed_mid_ingest_loses_nothing_the_message_comes_back_and_completes_once(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    started = time.monotonic()
    done_at_kill, total = killed_mid_ingest(make_worker(), faults)
    assert 0 < done_at_kill < total
    faults.resolve_delay = 0.0
    worker = make_worker().start()  # a fresh worker, as a supervisor would restart it
    assert wait_until(qwen_done, VISIBILITY + 60), worker.log()[-3000:]
    rev = qwen_revision()
    assert rev is not None
    assert_ingested_exactly_once(rev)
    assert rev.attempts == 2, "the killed delivery and the redelivered one"
    record(
        "sigkill", seconds=round(time.monotonic() - started, 1), files_done_at_kill=done_at_kill, total=total
    )


@pytest.mark.services
@needs_services
def test_negative_control_with_early_acks_the_killed_ingest_is_lost_until_the_reconciler_runs(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    killed_mid_ingest(make_worker(acks_late=False), faults)
    faults.resolve_delay = 0.0
    worker = make_worker(acks_late=False).start()
    assert not wait_until(qwen_done, VISIBILITY + 8), "acked at delivery: nothing should bring it back"
    rev = qwen_revision()
    assert rev is not None and rev.status == "running"
    # The lease (2 x hard time limit) is moved into the past instead of waited for.
    Revision.objects.filter(pk=rev.pk).update(started_at=datetime.now(UTC) - timedelta(hours=1))
    send(worker.broker.url, "packages_app.tasks.reconcile_stuck_revisions")
    assert wait_until(qwen_done, 60), worker.log()[-3000:]
    rev.refresh_from_db()
    assert_ingested_exactly_once(rev)
    record("sigkill-negative", lost_until_reconciled=True)


def demo_revisions() -> list[tuple[str, str]]:
    # The three 41-layer Qwen3.5 revisions first: they keep the worker busy while the rest wait queued.
    pairs = [(p.repo_id, r.sha) for p in DEMO_PACKAGES for r in p.revisions]
    return sorted(pairs, key=lambda pair: pair[0] != QWEN35_REPO)


def finished(shas: list[str]) -> int:
    return Revision.objects.filter(commit_sha__in=shas, status__in=["done", "failed"]).count()


def restart_broker_with_tasks_queued(worker: Worker, faults: RecordingFaults) -> dict[str, Any]:
    faults.resolve_delay = 0.05
    worker.start()
    pairs = demo_revisions()
    before, after = pairs[:9], pairs[9:]
    for repo_id, sha in before:
        send(worker.broker.url, INGEST, repo_id, sha)
    assert wait_until(lambda: finished([s for _, s in before]) >= 1, 60), worker.log()[-3000:]
    queued = int(worker.broker.client().llen("celery"))
    assert queued >= 3, "the restart must happen while tasks wait in the queue"
    worker.broker.restart()
    for repo_id, sha in after:  # enqueued after the restart: the worker must still be consuming
        send(worker.broker.url, INGEST, repo_id, sha)
    return {"before": [s for _, s in before], "after": [s for _, s in after], "queued_at_restart": queued}


@pytest.mark.services
@needs_services
def test_a_broker_restart_with_tasks_queued_loses_none_and_runs_each_once(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    started = time.monotonic()
    worker = make_worker(concurrency=2)
    run = restart_broker_with_tasks_queued(worker, faults)
    everything = run["before"] + run["after"]
    assert wait_until(lambda: finished(everything) == len(everything), 120), worker.log()[-3000:]
    revisions = Revision.objects.filter(commit_sha__in=everything)
    assert sorted(r.attempts for r in revisions) == [1] * len(everything), "each ran exactly once"
    assert all(r.status == "done" for r in revisions)
    record(
        "redis-restart",
        seconds=round(time.monotonic() - started, 1),
        tasks=len(everything),
        queued_at_restart=run["queued_at_restart"],
        completed=len(everything),
    )


@pytest.mark.services
@needs_services
def test_negative_control_a_broker_without_persistence_loses_the_queued_tasks(
    tmp_path: Path, make_worker: Callable[..., Worker], faults: RecordingFaults, broker: RedisServer
) -> None:
    broker.stop()
    broker.persistent = False  # the same server, started with --appendonly no --save ""
    broker.start()
    worker = make_worker(concurrency=2)
    run = restart_broker_with_tasks_queued(worker, faults)
    assert wait_until(lambda: finished(run["after"]) == len(run["after"]), 120), worker.log()[-3000:]
    time.sleep(3)  # let whatever the worker still holds finish
    lost = len(run["before"]) - finished(run["before"])
    assert lost >= 1, "without persistence the queued messages should be gone"
    record("redis-restart-negative", queued_at_restart=run["queued_at_restart"], lost=lost)


def worker_alive(worker: Worker) -> bool:
    return worker.proc is not None and worker.proc.poll() is None


def small_revisions() -> list[tuple[str, str]]:
    """The Llama package's revisions (16 layers): quick ingests, well inside the test's time limit."""
    return [(p.repo_id, r.sha) for p in DEMO_PACKAGES for r in p.revisions if p.repo_id == LLAMA_REPO]


def restart_broker_while_ingests_run(worker: Worker, faults: RecordingFaults, restarts: int) -> list[str]:
    """One ingest at a time: wait until it runs, restart Redis under it; stop early if the worker exits.

    The Llama revisions in turn, each ingested from scratch (its row deleted once finished); returns the
    shas sent. The worker exited if it is not alive afterwards.
    """
    faults.resolve_delay = 0.1
    worker.start()
    pairs = small_revisions()
    sent: list[str] = []
    for repo_id, sha in itertools.islice(itertools.cycle(pairs), restarts):
        finished_before = functools.partial(lambda s: finished([s]) == 1 or not worker_alive(worker), sha)
        assert wait_until(finished_before, 120) if sha in sent else True, worker.log()[-3000:]
        Revision.objects.filter(commit_sha=sha).delete()
        send(worker.broker.url, INGEST, repo_id, sha)
        sent.append(sha)
        running = Revision.objects.filter(commit_sha=sha, status__in=["running", "done", "failed"])
        started = functools.partial(lambda rows: rows.exists() or not worker_alive(worker), running)
        assert wait_until(started, 60), worker.log()[-3000:]
        if not worker_alive(worker):
            break
        worker.broker.restart()
    return sent


@pytest.mark.services
@needs_services
def test_the_worker_survives_ten_redis_restarts_while_tasks_run_and_keeps_consuming(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    started = time.monotonic()
    worker = make_worker(concurrency=2)
    shas = restart_broker_while_ingests_run(worker, faults, restarts=10)
    assert len(shas) == 10 and worker_alive(worker), worker.log()[-5000:]
    last = sorted(set(shas))
    assert wait_until(lambda: finished(last) == len(last), VISIBILITY + 60), worker.log()[-3000:]
    sha = next(r.sha for p in DEMO_PACKAGES if p.repo_id == GLM53_REPO for r in p.revisions)
    send(worker.broker.url, INGEST, GLM53_REPO, sha)  # sent after the last restart: still consuming
    assert wait_until(lambda: finished([sha]) == 1, 60), worker.log()[-3000:]
    assert worker_alive(worker)
    record("redis-restarts-while-running", restarts=10, seconds=round(time.monotonic() - started, 1))


@pytest.mark.services
@needs_services
def test_negative_control_with_kombus_own_redis_transport_a_restart_makes_the_worker_exit(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    worker = make_worker(concurrency=2, stock_redis_transport=True)
    shas = restart_broker_while_ingests_run(worker, faults, restarts=10)
    assert wait_until(lambda: not worker_alive(worker), 20), "the worker should have exited on a restart"
    assert "AttributeError" in worker.log(), "the kombu error the transport fix turns into a reconnect"
    record("redis-restarts-negative", restarts_until_exit=len(shas))


# --- PostgreSQL going away under running ingests ----------------------------------------------------


def database_outage_under_ingests(
    make_worker: Callable[..., Worker], faults: RecordingFaults, proxy: CuttableProxy, **knobs: Any
) -> tuple[Worker, list[str]]:
    """The three Llama revisions' ingests on two pool processes; PostgreSQL cut for 5 s once one is mid-way.

    The small package and the slowed Hub keep each ingest well inside the test's 12 s time limit on a
    busy machine, and long enough to be caught mid-way.
    """
    faults.resolve_delay = 0.3
    worker = make_worker(concurrency=2, db_port=proxy.port, **knobs).start()
    pairs = [(p.repo_id, r.sha) for p in DEMO_PACKAGES for r in p.revisions if p.repo_id == LLAMA_REPO]
    for repo_id, sha in pairs:
        send(worker.broker.url, INGEST, repo_id, sha)
    shas = [sha for _, sha in pairs]
    running = Revision.objects.filter(commit_sha__in=shas, status="running", files_done__gte=2)
    assert wait_until(running.exists, 60), worker.log()[-3000:]
    proxy.cut("refuse")
    time.sleep(5)  # the outage itself: what the tasks must outlast
    proxy.restore()
    faults.resolve_delay = 0.0  # slowed only to catch the ingests mid-way; the short test limits stay met
    return worker, shas


@pytest.mark.services
@needs_services
def test_ingests_running_when_postgresql_goes_away_retry_and_complete(
    make_worker: Callable[..., Worker], faults: RecordingFaults, db_proxy: CuttableProxy
) -> None:
    started = time.monotonic()
    worker, shas = database_outage_under_ingests(make_worker, faults, db_proxy)
    assert wait_until(lambda: finished(shas) == len(shas), 120), worker.log()[-3000:]
    revisions = Revision.objects.filter(commit_sha__in=shas)
    assert [r.status for r in revisions] == ["done"] * len(shas), [(r.status, r.error) for r in revisions]
    assert "the database is unavailable" in worker.log()
    record(
        "database-outage-mid-ingest",
        seconds=round(time.monotonic() - started, 1),
        tasks=len(shas),
        outage_s=5,
    )


@pytest.mark.services
@needs_services
def test_negative_control_without_the_retry_a_database_blip_fails_the_running_ingests(
    make_worker: Callable[..., Worker], faults: RecordingFaults, db_proxy: CuttableProxy
) -> None:
    _, shas = database_outage_under_ingests(make_worker, faults, db_proxy, no_db_retry=True)
    wait_until(lambda: not Revision.objects.filter(commit_sha__in=shas, status="queued").exists(), 60)
    time.sleep(3)  # let the tasks still running end
    unfinished = Revision.objects.filter(commit_sha__in=shas).exclude(status="done")
    assert unfinished.count() >= 1, (
        "acknowledged as failed: left for the reconciler (22-27 min in production)"
    )
    record("database-outage-mid-ingest-negative", not_done=unfinished.count(), tasks=len(shas))


# --- Hub rate limits at the task level --------------------------------------------------------------


def hub_faults_scenario(
    make_worker: Callable[..., Worker], faults: RecordingFaults, **knobs: Any
) -> list[float]:
    faults.add(429, 1, retry_after=3, match="model-package.json")
    faults.add(503, 1, retry_after=2, match="model-package.json")
    worker = make_worker(hub_client_retries=0, **knobs).start()
    send(worker.broker.url, INGEST, QWEN35_REPO, QWEN35_FIRST_SHA)
    assert wait_until(qwen_done, 90), worker.log()[-3000:]
    statuses = [status for _, status in faults.manifest_requests]
    assert statuses == [429, 503, 200]
    times = [t for t, _ in faults.manifest_requests]
    return [later - earlier for earlier, later in itertools.pairwise(times)]


@pytest.mark.services
@needs_services
def test_hub_429_and_503_are_retried_after_their_retry_after_and_then_succeed(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    gaps = hub_faults_scenario(make_worker, faults)
    assert gaps[0] >= 3 - 0.1 and gaps[1] >= 2 - 0.1, gaps
    rev = qwen_revision()
    assert rev is not None and rev.attempts == 3 and rev.error == ""
    assert_ingested_exactly_once(rev)
    record("hub-429-503", gaps=[round(g, 2) for g in gaps], retry_after=[3, 2], attempts=rev.attempts)


@pytest.mark.services
@needs_services
def test_negative_control_retries_that_ignore_retry_after_come_too_early(
    make_worker: Callable[..., Worker], faults: RecordingFaults
) -> None:
    gaps = hub_faults_scenario(make_worker, faults, ignore_retry_after=True)
    assert gaps[0] < 3 - 0.1 and gaps[1] < 2 - 0.1, gaps
    record("hub-429-503-negative", gaps=[round(g, 2) for g in gaps])


# --- poison messages ---------------------------------------------------------------------------------


def poison_scenario(make_worker: Callable[..., Worker], tmp_path: Path, **knobs: Any) -> tuple[Worker, Path]:
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA)
    deliveries = tmp_path / "poison-deliveries"
    deliveries.touch()
    worker = make_worker(poison_repo=QWEN35_REPO, poison_log=str(deliveries), **knobs).start()
    send(worker.broker.url, INGEST, QWEN35_REPO, QWEN35_FIRST_SHA)
    return worker, deliveries


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


@pytest.mark.services
@needs_services
def test_a_message_that_kills_its_worker_is_quarantined_after_three_deliveries(
    make_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    started = time.monotonic()
    worker, deliveries = poison_scenario(make_worker, tmp_path)

    def quarantined() -> bool:
        rev = qwen_revision()
        return rev is not None and rev.status == "failed"

    assert wait_until(quarantined, 90), worker.log()[-3000:]
    rev = qwen_revision()
    assert rev is not None and rev.error == "quarantined after 3 deliveries that never finished"
    time.sleep(2)
    assert count_lines(deliveries) == 3, "acknowledged, so never delivered again"
    assert worker.proc is not None and worker.proc.poll() is None, "the worker itself survived"
    record("poison", deliveries=count_lines(deliveries), seconds=round(time.monotonic() - started, 1))


@pytest.mark.services
@needs_services
def test_a_message_that_hangs_past_the_hard_time_limit_is_quarantined_after_three_deliveries(
    make_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    started = time.monotonic()
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA)
    deliveries = tmp_path / "hang-deliveries"
    deliveries.touch()
    worker = make_worker(poison_repo=QWEN35_REPO, poison_log=str(deliveries), poison="hang")
    worker.limits = (1, 2, 30)  # a hang costs 2 s here instead of the production 660 s
    worker.start()
    send(worker.broker.url, INGEST, QWEN35_REPO, QWEN35_FIRST_SHA)

    def quarantined() -> bool:
        rev = qwen_revision()
        return rev is not None and rev.status == "failed"

    assert wait_until(quarantined, 90), worker.log()[-3000:]
    rev = qwen_revision()
    assert rev is not None and rev.error == "quarantined after 3 deliveries that never finished"
    assert count_lines(deliveries) == 3 and "Hard time limit (2" in worker.log()
    record("hang", deliveries=count_lines(deliveries), seconds=round(time.monotonic() - started, 1))


@pytest.mark.services
@needs_services
def test_negative_control_without_quarantine_the_poison_message_comes_back_forever(
    make_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    worker, deliveries = poison_scenario(make_worker, tmp_path, max_deliveries=10_000)
    assert wait_until(lambda: count_lines(deliveries) >= 5, 90), worker.log()[-3000:]
    rev = qwen_revision()
    assert rev is not None and rev.status == "queued"
    record("poison-negative", deliveries_seen=count_lines(deliveries))


# --- PostgreSQL down behind a cuttable proxy ----------------------------------------------------------


class CuttableProxy:
    """A TCP proxy on loopback in front of PostgreSQL. cut() drops every open connection; new ones are
    then closed at once ("refuse": the server is down) or accepted and never answered ("blackhole": the
    host is unreachable, which only the client's connect timeout ends)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.is_cut = False
        self.mode = "refuse"
        self.accepted = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.is_cut and self.mode == "blackhole":
                self._held.append(client)
                continue
            if self.is_cut:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in selector.select(timeout=1):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            a.close()
            b.close()

    def cut(self, mode: str = "refuse") -> None:
        self.is_cut, self.mode = True, mode
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.is_cut = False
        held, self._held = self._held, []
        for client in held:
            client.close()

    def close(self) -> None:
        self.cut()
        self.listener.close()


# Runs gunicorn with the real settings; the negative control removes the middleware under test first.
SERVER_SCRIPT = r"""
import json, os, sys
knobs = json.loads(os.environ["MESHDASH_FAULT_KNOBS"])
import meshdash.settings as s
if knobs.get("without_db_middleware"):
    s.MIDDLEWARE.remove("meshdash.middleware.DatabaseUnavailableMiddleware")
from gunicorn.app.wsgiapp import run
sys.argv = ["gunicorn", "meshdash.wsgi", "--bind", f"127.0.0.1:{knobs['port']}", "--workers", "1",
            "--threads", "4", "--timeout", "30", "--graceful-timeout", "2"]
run()
"""


@dataclass
class AppServer:
    proxy: CuttableProxy
    log_path: Path
    knobs: dict[str, Any] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AppServer:
        env = {
            k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL", "CACHE_URL")
        }
        env |= {
            "DATABASE_URL": database_url(self.proxy.port),
            "DATABASE_CONNECT_TIMEOUT": "2",
            "DEBUG": "false",
            "SECRET_KEY": "fault-test-" + uuid.uuid4().hex * 2,
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "MESHDASH_NAMESPACES": "nobody-tracked",  # reports never enqueue an ingest here
            "HF_ENDPOINT": "http://127.0.0.1:9",
            "MESHDASH_FAULT_KNOBS": json.dumps({"port": self.port, **self.knobs}),
        }
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", SERVER_SCRIPT],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert wait_until(lambda: self.get("/api/v1/ping")[0] == 200, 30), self.log_path.read_text()[-3000:]
        return self

    def request(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=15) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()
        except OSError:
            return 0, {}, b""

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return self.request("GET", path)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def db_proxy() -> Iterator[CuttableProxy]:
    s = connection.settings_dict
    proxy = CuttableProxy((s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)))
    yield proxy
    proxy.close()


@pytest.fixture
def app_server(
    db_proxy: CuttableProxy, tmp_path: Path, transactional_db: None
) -> Iterator[Callable[..., AppServer]]:
    servers: list[AppServer] = []
    log_path = tmp_path / "server.log"
    log_path.write_text("")

    def make(**knobs: Any) -> AppServer:
        server = AppServer(db_proxy, log_path, knobs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@functools.cache  # a node retrying a report sends the very same body
def report_body(report_id: str) -> bytes:
    body = {
        "report_id": report_id,
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN35_REPO, "revision": QWEN35_FIRST_SHA},
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "disabled",
            "mtp_source": "Disabled",
        },
        "timings": {"predicted_n": 256, "predicted_ms": 80757.0, "predicted_per_second": 3.17},
    }
    return json.dumps(body).encode()


def post_report(server: AppServer, token: str, report_id: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return server.request("POST", "/api/v1/reports", report_body(report_id), **headers)


def outage_statuses(
    server: AppServer, proxy: CuttableProxy, token: str, ids: list[str], mode: str = "refuse"
) -> list[tuple[int, dict[str, str], bytes]]:
    assert post_report(server, token, str(uuid.uuid4()))[0] == 201  # warm: a pooled connection exists
    proxy.cut(mode)
    with ThreadPoolExecutor(max_workers=8) as clients:  # eight nodes posting at once
        answers = list(clients.map(lambda report_id: post_report(server, token, report_id), ids))
    answers.append(server.get("/"))
    return answers


@pytest.mark.services
@needs_services
@pytest.mark.parametrize(("mode", "reports"), [("refuse", 200), ("blackhole", 8)])
def test_with_postgresql_down_the_report_api_answers_503_and_recovers_without_losing_a_report(
    app_server: Callable[..., AppServer], db_proxy: CuttableProxy, mode: str, reports: int
) -> None:
    token = nodes.create_node("node-fault").token
    server = app_server()
    ids = [str(uuid.uuid4()) for _ in range(reports)]
    started = time.monotonic()
    answers = outage_statuses(server, db_proxy, token, ids, mode)
    outage_seconds = time.monotonic() - started
    assert [status for status, _, _ in answers] == [503] * len(answers)
    for _status, headers, body in answers[:-1]:
        assert int(headers["Retry-After"]) > 0 and json.loads(body) == {
            "error": "The database is unavailable; try again shortly."
        }
    assert b"Temporarily unavailable" in answers[-1][2] and int(answers[-1][1]["Retry-After"]) > 0
    db_proxy.restore()
    # A node retries what got 503: each report is then stored exactly once.
    assert wait_until(lambda: post_report(server, token, ids[0])[0] == 201, 15)
    assert [post_report(server, token, report_id)[0] for report_id in ids[1:]] == [201] * (len(ids) - 1)
    assert [post_report(server, token, report_id)[0] for report_id in ids[:3]] == [200] * 3  # replays
    assert Report.objects.filter(report_id__in=ids).count() == len(ids)
    record(
        f"postgres-down-{mode}",
        requests_during_outage=len(answers),
        answered_503=len(answers),
        outage_wall_seconds=round(outage_seconds, 2),
        reports_stored_after_recovery=len(ids),
    )


@pytest.mark.services
@needs_services
def test_negative_control_without_the_middleware_a_database_outage_is_a_500(
    app_server: Callable[..., AppServer], db_proxy: CuttableProxy
) -> None:
    token = nodes.create_node("node-fault").token
    server = app_server(without_db_middleware=True)
    answers = outage_statuses(server, db_proxy, token, [str(uuid.uuid4()) for _ in range(3)])
    assert {status for status, _, _ in answers} == {500}
    record("postgres-down-negative", statuses=sorted({status for status, _, _ in answers}))


# --- figures for RELIABILITY.md ---------------------------------------------------------------------


def record(scenario: str, **figures: Any) -> None:
    """Append what a fault test measured to var/fault-figures.jsonl (RELIABILITY.md quotes them)."""
    path = ROOT / "var" / "fault-figures.jsonl"
    path.parent.mkdir(exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps({"scenario": scenario, "at": datetime.now(UTC).isoformat(), **figures}) + "\n")
