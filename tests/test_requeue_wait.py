"""A re-queued revision's wait starts when it is queued again (issue 48): it kept its first ``queued_at``, so
the queue-wait gauge and the "waited over an hour" alert counted a wait that had not happened."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from packages_app import ingest, monitoring, tasks
from packages_app.models import Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(hours=3)


def done_revision() -> Revision:
    """A revision first queued three hours ago and long since ingested."""
    revision = f.make_revision(f.make_package("meshllm/junk-layers"), "consistent-no-mtp")
    Revision.objects.filter(pk=revision.pk).update(queued_at=timezone.now() - LONG_AGO)
    return revision


def waited() -> float:
    return monitoring.current_figures().oldest_queued_age


def test_an_operators_reingest_starts_the_wait_now(operator_client: Client, settings: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    done_revision()
    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit"):
        assert operator_client.post("/packages/meshllm/junk-layers/reingest").status_code == 302
    assert Revision.objects.get().status == "queued" and waited() < 60


def test_an_ingest_queued_again_after_its_time_limit_starts_the_wait_now() -> None:
    revision = done_revision()
    status = ingest.release_timed_out(revision.package.repo_id, revision.commit_sha, 600, give_up_after=3)
    assert status == "queued" and waited() < 60


def test_control_the_old_requeue_kept_the_first_queued_at_and_the_gauge_read_three_hours() -> None:
    done_revision()
    Revision.objects.update(status=Revision.Status.QUEUED)  # what the re-ingest did before
    assert waited() >= LONG_AGO.total_seconds() - 5
