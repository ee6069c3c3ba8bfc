"""Celery tasks: retry policy in-process, and a real worker process consuming from Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from packages_app import hub, tasks
from packages_app.devhub import QWEN35_FIRST_SHA, QWEN35_REPO, DevHub
from packages_app.models import PackageFile, Revision

ROOT = Path(__file__).resolve().parent.parent


def test_a_retry_waits_as_long_as_retry_after_says() -> None:
    assert tasks.retry_countdown(hub.HubUnavailable("429", retry_after=17), retries=0) == 17


def test_a_retry_without_retry_after_backs_off_exponentially() -> None:
    waits = [tasks.retry_countdown(hub.HubUnavailable("503"), retries=n) for n in range(4)]
    assert waits == [2, 4, 8, 16]


def test_a_retry_never_waits_longer_than_the_cap() -> None:
    assert tasks.retry_countdown(hub.HubUnavailable("429", retry_after=10**6), retries=0) == tasks.MAX_BACKOFF


@pytest.mark.django_db
def test_the_ingest_task_retries_a_hub_outage_and_the_retry_completes(
    hub_settings: DevHub, eager_tasks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = hub.HubSource.__init__

    def no_client_retries(self: hub.HubSource, repo_id: str, **kwargs: object) -> None:
        kwargs["max_retries"] = 0
        original(self, repo_id, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hub.HubSource, "__init__", no_client_retries)
    hub_settings.fail_next(1, 503, retry_after=0, match="model-package.json")
    # Eagerly, Celery runs the retry at once: one call sees the outage and then the success.
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA), throw=False)
    assert result.state == "SUCCESS" and result.result == Revision.Status.DONE
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert rev.attempts == 2 and rev.verdict == "undeclared-mtp"


@pytest.mark.django_db
def test_the_ingest_task_does_not_retry_a_missing_repo(hub_settings: DevHub, eager_tasks: None) -> None:
    result = tasks.ingest_revision_task.apply(args=("meshllm/No-Such-layers", QWEN35_FIRST_SHA))
    assert result.get() == tasks.UNCONFIRMED  # the Hub does not know it: not retried, nothing stored


# --- a real worker ------------------------------------------------------------------------------

needs_services = pytest.mark.skipif(
    not os.environ.get("CELERY_BROKER_URL") or connection.vendor != "postgresql",
    reason="needs CELERY_BROKER_URL and a PostgreSQL DATABASE_URL (make test-services)",
)


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def worker(devhub: DevHub, transactional_db: None) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker process on the test database, fed by the suite's Redis broker."""
    from meshdash.celery import app

    app.control.purge()
    env = {**os.environ, "DATABASE_URL": _database_url(), "HF_ENDPOINT": devhub.url}
    xdist_worker = os.environ.get("PYTEST_XDIST_WORKER")  # one log per xdist worker
    name = f"test-worker-{xdist_worker}.log" if xdist_worker else "test-worker.log"
    log = open(ROOT / "var" / name, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "meshdash", "worker", "-c", "2", "--loglevel=INFO"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield proc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def wait_until(predicate: object, timeout: float = 180.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


@pytest.mark.services
@pytest.mark.serial  # a real Celery worker, one at a time, alone in the services pass
@needs_services
def test_a_real_worker_syncs_and_ingests_a_package_from_redis(worker: subprocess.Popen[bytes]) -> None:
    tasks.sync_package_task.delay(QWEN35_REPO)

    def all_done() -> bool:
        revs = Revision.objects.filter(package__repo_id=QWEN35_REPO)
        return revs.count() >= 3 and not revs.exclude(status__in=["done", "failed"]).exists()

    assert wait_until(all_done), list(Revision.objects.values_list("commit_sha", "status", "error"))
    first = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert first.status == "done" and first.verdict == "undeclared-mtp"
    assert PackageFile.objects.filter(revision=first, role="layer").count() == 41
    assert Revision.objects.exclude(commit_sha=QWEN35_FIRST_SHA).filter(verdict="consistent-mtp").exists()


@pytest.mark.services
@pytest.mark.serial
@needs_services
def test_the_same_ingest_enqueued_twice_leaves_one_set_of_rows(worker: subprocess.Popen[bytes]) -> None:
    for _ in range(3):
        tasks.ingest_revision_task.delay(QWEN35_REPO, QWEN35_FIRST_SHA)

    def done() -> bool:
        return Revision.objects.filter(commit_sha=QWEN35_FIRST_SHA, status="done").exists()

    assert wait_until(done)
    time.sleep(2)  # let the duplicates run to completion too
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert rev.files.count() == rev.files_total + 3  # .gitattributes, README.md, model-package.json
    assert rev.attempts == 1
