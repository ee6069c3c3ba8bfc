"""Tracking asks the Hub first: one call, in the worker, before any catalog row; a missing repo reads as
such on the ingest page; a Hub URL is taken wherever a repo id is."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from celery.exceptions import Retry
from django.test import Client

from packages_app import repo_ids, tasks, tracking
from packages_app.devhub import QWEN35_REPO, DevHub
from packages_app.models import ActionLog, Package, TrackRequest

pytestmark = pytest.mark.django_db

MISSING = "meshllm/does-not-exist-layers"


@pytest.fixture
def queued(settings: Any, hub_settings: DevHub) -> Any:
    """A broker is configured: the view only enqueues; the queued track tasks are recorded, not run."""
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    hub_settings.counters.reset()
    with (
        mock.patch.object(tasks.track_package_task, "delay_on_commit") as track,
        mock.patch.object(tasks.sync_package_task, "delay_on_commit") as sync,
    ):
        yield track, sync


def test_a_track_stores_no_catalog_row_and_asks_the_hub_nothing_in_the_request(
    operator_client: Client, queued: Any, hub_settings: DevHub, django_capture_on_commit_callbacks: Any
) -> None:
    track, _ = queued
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post("/ingest/", {"repo_id": MISSING})
    assert response.status_code == 302
    assert not Package.objects.exists()
    assert hub_settings.counters.requests == 0
    track.assert_called_once_with(MISSING)
    assert TrackRequest.objects.get().status == TrackRequest.Status.CHECKING
    page = operator_client.get("/ingest/").content.decode()
    assert "Checking meshllm/does-not-exist-layers on the Hub" in page and "checking the Hub" in page
    assert MISSING not in operator_client.get("/").content.decode()  # no catalog row
    assert ActionLog.objects.get().target == MISSING


def test_a_repo_the_hub_does_not_have_is_never_tracked_and_the_ingest_page_says_so(
    operator_client: Client, queued: Any, hub_settings: DevHub
) -> None:
    _, sync = queued
    operator_client.post("/ingest/", {"repo_id": MISSING})
    assert tasks.track_package_task.apply(args=[MISSING]).get() == "not-tracked"
    assert hub_settings.counters.requests == 1  # one Hub call
    assert not Package.objects.exists() and sync.call_count == 0
    request = TrackRequest.objects.get()
    assert request.status == TrackRequest.Status.MISSING and "The Hub has no such repo" in request.message
    page = operator_client.get("/ingest/").content.decode()
    assert "not on the Hub" in page and MISSING in page
    assert MISSING not in operator_client.get("/").content.decode()


def test_a_repo_the_hub_has_is_tracked_by_the_worker_and_synced(
    operator_client: Client, queued: Any, hub_settings: DevHub, django_capture_on_commit_callbacks: Any
) -> None:
    _, sync = queued
    url = f"https://huggingface.co/{QWEN35_REPO}"  # what people copy, whatever HF_ENDPOINT serves it
    assert operator_client.post("/ingest/", {"repo_id": url}).status_code == 302
    assert not Package.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.track_package_task.apply(args=[QWEN35_REPO]).get() == "tracked"
    assert hub_settings.counters.requests == 1
    assert Package.objects.get().repo_id == QWEN35_REPO and Package.objects.get().tracked
    sync.assert_called_once_with(QWEN35_REPO)
    assert not TrackRequest.objects.exists()
    assert "Asked to track" not in operator_client.get("/ingest/").content.decode()


def test_track_requests_are_shown_only_to_those_who_may_track(
    client: Client, operator_client: Client, queued: Any
) -> None:
    operator_client.post("/ingest/", {"repo_id": "meshllm/Secret-Thing-layers"})
    assert "Secret-Thing" in operator_client.get("/ingest/").content.decode()
    assert "Secret-Thing" not in client.get("/ingest/").content.decode()


def test_a_hub_outage_is_retried_and_then_reads_as_a_failed_check(
    monkeypatch: pytest.MonkeyPatch, hub_settings: DevHub
) -> None:
    from packages_app import hub

    tracking.request_track(QWEN35_REPO)

    def down(self: Any, revision: str | None) -> str:
        raise hub.HubUnavailable(f"{QWEN35_REPO}: the Hub answered 503")

    monkeypatch.setattr(hub.HubSource, "resolve_revision", down)
    monkeypatch.setattr(tasks, "retry_countdown", lambda exc, retries: 0)
    with pytest.raises(Retry):  # the first attempts are retried: the request is still being checked
        tasks.track_package_task.apply(args=[QWEN35_REPO], throw=True)
    assert TrackRequest.objects.get().status == TrackRequest.Status.CHECKING
    assert tasks.track_package_task.apply(args=[QWEN35_REPO], retries=tasks.MAX_RETRIES).get() == "failed"
    request = TrackRequest.objects.get()
    assert request.status == TrackRequest.Status.FAILED and "503" in request.message
    assert not Package.objects.exists()


@pytest.mark.parametrize(
    ("value", "repo_id", "revision"),
    [
        ("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers", "meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers", None),
        (
            "https://huggingface.co/meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers",
            "meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers",
            None,
        ),
        ("https://huggingface.co/meshllm/x-layers/", "meshllm/x-layers", None),
        ("https://huggingface.co/meshllm/x-layers/tree/main", "meshllm/x-layers", "main"),
        (
            "https://huggingface.co/meshllm/x-layers/tree/refs%2Fpr%2F3/layers",
            "meshllm/x-layers",
            "refs/pr/3",
        ),
        ("http://127.0.0.1:8765/meshllm/x-layers/tree/" + "a" * 40, "meshllm/x-layers", "a" * 40),
        ("  https://hub.example.org/mirror/meshllm/x-layers  ", "meshllm/x-layers", None),
    ],
)
def test_a_hub_url_reads_as_its_repo_id_and_revision(value: str, repo_id: str, revision: str | None) -> None:
    endpoints = ["http://127.0.0.1:8765", "https://hub.example.org/mirror/"]
    assert repo_ids.parse_repo_reference(value, endpoints) == repo_ids.RepoReference(repo_id, revision)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("https://elsewhere.example/meshllm/x-layers", "not a URL of the Hub"),
        ("http://huggingface.co/meshllm/x-layers", "not a URL of the Hub"),  # the scheme counts too
        ("https://hub.example.org/meshllm/x-layers", "not a URL of the Hub"),  # outside the mirror's path
        ("https://huggingface.co/spaces/meshllm/demo", "is a space"),
        ("https://huggingface.co/meshllm", "names no repo"),
        ("https://huggingface.co/meshllm/x-layers/resolve/main/a.gguf", "only /tree/<revision>"),
        ("https://huggingface.co/meshllm/x-layers/tree", "only /tree/<revision>"),
        ("https://huggingface.co/meshllm/x-layers/tree/a..b", "not a branch, tag or commit"),
        ("https://huggingface.co/meshllm/a--b", "cannot contain"),
        ("https://huggingface.co/meshllm/x#top", "no query, fragment"),
    ],
)
def test_a_url_that_names_no_model_repo_of_the_hub_is_refused_with_the_reason(
    value: str, reason: str
) -> None:
    with pytest.raises(repo_ids.InvalidRepoId, match=reason):
        repo_ids.parse_repo_reference(value, ["https://hub.example.org/mirror"])


def test_the_ingest_command_takes_the_revision_of_a_hub_url(hub_settings: DevHub) -> None:
    from io import StringIO

    from django.core.management import call_command

    from packages_app.devhub import QWEN35_FIRST_SHA

    out = StringIO()
    url = f"{hub_settings.url}/{QWEN35_REPO}/tree/{QWEN35_FIRST_SHA}"
    call_command("ingest", url, "--no-progress", stdout=out, stderr=StringIO())
    assert f"{QWEN35_REPO}@{QWEN35_FIRST_SHA}" in out.getvalue()
