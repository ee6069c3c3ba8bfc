"""Redis down (issue 48): /metrics, sign-in, a node's report and an operator's re-ingest each answer what they
can (503 with the reason and Retry-After; figures read without the cache; the re-ingest said to be queued),
never 500. The cache is a real Redis client pointed at a closed port; the broker's refusal is what Celery's
publish raises then (kombu's OperationalError). The control takes the guard off (nothing treated as an
outage) and gets the issue's 500s."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

import meshdash.middleware
from packages_app import queueing, tasks
from packages_app.devhub import QWEN35_FIRST_SHA, QWEN35_REPO
from packages_app.models import Revision
from packages_app.nodes import identity
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens: every call is refused at once


@pytest.fixture
def redis_down(settings: Any) -> None:
    settings.CACHES = {"default": {"BACKEND": "meshdash.cache.PooledRedisCache", "LOCATION": DEAD_REDIS}}
    settings.CELERY_BROKER_URL = DEAD_REDIS
    settings.MESHDASH_NODE_RATE_LIMIT = 1200


@pytest.fixture
def guard_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is an outage: the exception goes on to Django's 500 (as before issue 48)."""
    monkeypatch.setattr(queueing, "BROKER_DOWN", ())
    monkeypatch.setattr(meshdash.middleware, "BROKER_DOWN", ())


def report(token: str) -> Any:
    body = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN35_REPO, "revision": QWEN35_FIRST_SHA},
        "timings": {"predicted_n": 256, "predicted_ms": 80757.0},
    }
    client = Client(raise_request_exception=False)
    return client.post(
        "/api/v1/reports",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def sign_in() -> Any:
    User.objects.create_user("ada", password="right-password-123")
    client = Client(raise_request_exception=False)
    return client.post("/accounts/login/", {"username": "ada", "password": "wrong"})


def metrics() -> Any:
    return Client(REMOTE_ADDR="127.0.0.1", raise_request_exception=False).get("/metrics")


def reingest(admin_client: Client) -> tuple[Any, Revision]:
    package = f.make_package("meshllm/junk-layers")
    done = f.make_revision(package, "consistent-no-mtp")
    Revision.objects.filter(pk=done.pk).update(queued_at=timezone.now() - timedelta(hours=3))
    admin_client.raise_request_exception = False
    refused = BrokerUnreachable("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    with mock.patch.object(tasks.ingest_revision_task, "delay", side_effect=refused):
        response = admin_client.post("/packages/meshllm/junk-layers/reingest", follow=True)
    done.refresh_from_db()
    return response, done


def test_a_nodes_report_answers_503_with_the_reason(redis_down: None) -> None:
    response = report(identity.create_node("node-a").token)
    assert response.status_code == 503 and response["Retry-After"]
    assert "Redis" in response.json()["error"]


def test_sign_in_answers_503_with_the_reason_and_checks_no_password(redis_down: None) -> None:
    with mock.patch.object(User, "check_password") as checked:
        response = sign_in()
    assert response.status_code == 503 and b"Redis" in response.content
    checked.assert_not_called()  # the throttle could not count the guess, so nothing was guessed


def test_metrics_answer_with_the_figures_read_without_the_cache(redis_down: None) -> None:
    response = metrics()
    assert response.status_code == 200 and b"meshdash_database_up 1.0" in response.content


@pytest.mark.django_db(transaction=True)  # the enqueue runs on commit, as in production
def test_an_operators_reingest_is_said_to_be_queued_and_its_wait_starts_now(
    redis_down: None, admin_client: Client
) -> None:
    response, revision = reingest(admin_client)
    assert response.status_code == 200  # the package page, after the redirect
    assert "queued for ingest again; the task queue is unavailable" in response.content.decode()
    assert revision.status == "queued" and timezone.now() - revision.queued_at < timedelta(minutes=1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("what", ["report", "sign-in", "metrics", "reingest"])
def test_control_without_the_outage_guard_each_answers_500(
    redis_down: None, guard_off: None, admin_client: Client, what: str
) -> None:
    if what == "report":
        status = report(identity.create_node("node-a").token).status_code
    elif what == "sign-in":
        status = sign_in().status_code
    elif what == "metrics":
        status = metrics().status_code
    else:
        status = reingest(admin_client)[0].status_code
    assert status == 500
