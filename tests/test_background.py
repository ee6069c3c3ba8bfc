"""Never work inside a web request: with eager tasks the work goes to a thread pool (or is refused),
with a broker it is enqueued; a revision left `running` is reconciled in both modes."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from packages_app import background, ingest, queueing
from packages_app.models import Package, Revision
from tests import dashboard_factories as f

REPO = "meshllm/slow-layers"


@pytest.fixture
def eager(settings: Any, eager_tasks: None) -> None:
    """No broker: what the one-machine default runs with (Celery eager too, whatever the suite's broker)."""
    settings.CELERY_BROKER_URL = ""


@pytest.fixture
def slow_track(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sync a track starts holds until released (like a slow Hub), recording the thread it ran on."""
    release = threading.Event()
    ran_on: list[str] = []

    def slow_sync(repo_id: str) -> None:
        ran_on.append(threading.current_thread().name)
        release.wait(30)

    monkeypatch.setattr(queueing, "enqueue_track", slow_sync)
    yield release, ran_on
    release.set()
    assert background.wait_idle(30)


def operator_client() -> Client:
    # Transaction tests flush the "operators" group of the migration; the permission itself is recreated.
    user = User.objects.create_user("olga")
    user.user_permissions.add(Permission.objects.get(codename="track_package"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
def test_a_slow_ingest_does_not_hold_the_request_with_eager_tasks(eager: None, slow_track: Any) -> None:
    release, ran_on = slow_track
    response = operator_client().post("/ingest/", {"repo_id": REPO})
    # The request has answered while the work is still held: it runs on the pool, not in the request.
    assert response.status_code == 302 and not release.is_set()
    release.set()
    assert background.wait_idle(30)
    assert ran_on and ran_on[0].startswith("meshdash-bg")


@pytest.mark.django_db(transaction=True)
def test_with_a_broker_the_view_only_enqueues_in_the_request(settings: Any, slow_track: Any) -> None:
    # The control: here the enqueue runs in the request thread, which is right only because with a
    # broker it sends a message; with eager tasks the same call runs the whole sync and ingest.
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    release, ran_on = slow_track
    release.set()
    assert operator_client().post("/ingest/", {"repo_id": REPO}).status_code == 302
    assert ran_on == [threading.current_thread().name]


@pytest.mark.django_db(transaction=True)
def test_a_full_pool_refuses_new_work_with_a_message(eager: None, slow_track: Any, settings: Any) -> None:
    settings.MESHDASH_BACKGROUND_QUEUE = 1
    client = operator_client()
    client.post("/ingest/", {"repo_id": REPO})
    response = client.post("/ingest/", {"repo_id": "meshllm/second-layers"}, follow=True)
    assert "The server is busy with earlier work" in response.content.decode()
    assert len(slow_track[1]) <= 1


@pytest.mark.django_db(transaction=True)
def test_a_stuck_running_revision_is_reconciled_without_a_broker(
    eager: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import cache

    cache.delete("meshdash:reconcile-from-web")
    package = f.make_package(REPO)
    stuck = f.make_revision(package, "", status=Revision.Status.RUNNING)
    Revision.objects.filter(pk=stuck.pk).update(started_at=timezone.now() - timedelta(days=1))
    fresh = f.make_revision(package, "", status=Revision.Status.RUNNING, latest=False)
    Revision.objects.filter(pk=fresh.pk).update(started_at=timezone.now())
    ingested: list[str] = []
    monkeypatch.setattr(ingest, "ingest_revision", lambda repo, sha, **kw: ingested.append(sha))
    assert Client().get("/ingest/").status_code == 200
    assert background.wait_idle(30)
    assert ingested == [stuck.commit_sha]
    assert Package.objects.count() == 1
