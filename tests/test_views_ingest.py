"""The ingest status page: queued, running and failed ingests, and the form that tracks a new package."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from packages_app import tracking
from packages_app.models import Package, Revision
from packages_app.web.forms import validate_repo_id
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def tracked(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[str]:
    """Wraps tracking.request_track (the view's only write) and records what it was asked.

    With a broker set, the view calls it in the request (it only writes a row and enqueues the Hub check).
    """
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    calls: list[str] = []

    real = tracking.request_track

    def recording_track(repo_id: str) -> Any:
        calls.append(repo_id)
        return real(repo_id)

    monkeypatch.setattr(tracking, "request_track", recording_track)
    return calls


def text(response: Any) -> str:
    return response.content.decode()


def test_it_lists_running_and_queued_ingests_with_progress(client: Client) -> None:
    package = f.make_package("meshllm/GLM-5.3-Flash-UD-Q4_K_XL-layers")
    f.make_revision(package, "", status=Revision.Status.RUNNING, files_total=48, files_done=12)
    f.make_revision(package, "", status=Revision.Status.QUEUED, latest=False)
    body = text(client.get("/ingest/"))
    assert body.count("GLM-5.3-Flash-UD-Q4_K_XL-layers</a>") == 2
    assert '<progress max="48" value="12"' in body
    assert "Nothing queued or running." not in body


def test_it_lists_failed_ingests_with_their_error_and_failed_syncs(client: Client) -> None:
    package = f.make_package("meshllm/Kimi-K3-UD-Q4_K_XL-layers")
    f.make_revision(package, "", status=Revision.Status.FAILED, error="HubUnavailable: 503 after 5 tries")
    Package.objects.filter(pk=package.pk).update(sync_error="HubNotFound: the repo is gone")
    body = text(client.get("/ingest/"))
    assert "HubUnavailable: 503 after 5 tries" in body
    assert "HubNotFound: the repo is gone" in body


def test_a_valid_repo_id_is_tracked_and_the_browser_is_redirected(
    operator_client: Client, tracked: list[str]
) -> None:
    client = operator_client
    response = client.post("/ingest/", {"repo_id": "  meshllm/Qwen3-235B-A22B-UD-Q4_K_XL-layers "})
    assert response.status_code == 302 and response["Location"] == "/ingest/"
    assert tracked == ["meshllm/Qwen3-235B-A22B-UD-Q4_K_XL-layers"]
    assert "Checking meshllm/Qwen3-235B-A22B-UD-Q4_K_XL-layers on the Hub" in text(client.get("/ingest/"))


@pytest.mark.parametrize(
    ("repo_id", "message"),
    [
        ("https://elsewhere.example/meshllm/x-layers", "is not a URL of the Hub"),
        ("https://huggingface.co/datasets/meshllm/catalog", "is a dataset, not a model repo"),
        ("/srv/models/x-layers", "not a URL or a path"),
        ("..\\x", "not a URL or a path"),
        ("x-layers", "owner/name, with exactly one slash"),
        ("datasets/meshllm/catalog", "owner/name, with exactly one slash"),
        ("meshllm/a--b", "cannot contain &#x27;--&#x27; or &#x27;..&#x27;"),
        ("meshllm/a..b", "cannot contain"),
        ("meshllm/x-layers.git", "cannot end with &#x27;.git&#x27;"),
        ("meshllm/.hidden", "cannot start or end with"),
        ("meshllm/x-", "cannot start or end with"),
        ("meshllm/caf\u00e9", "letters, digits"),
        ("meshllm/<script>", "letters, digits"),
        ("meshllm/" + "a" * 97, "1-96 characters"),
        ("m" * 50 + "/" + "n" * 50, "at most 96 characters"),
        ("", "This field is required."),
    ],
)
def test_an_invalid_repo_id_is_refused_with_a_reason_and_nothing_is_tracked(
    operator_client: Client, tracked: list[str], repo_id: str, message: str
) -> None:
    response = operator_client.post("/ingest/", {"repo_id": repo_id})
    assert response.status_code == 400
    assert message in text(response)
    assert tracked == []


@pytest.mark.parametrize(
    "repo_id",
    ["meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers", "a/b", "Owner_1/name.v2-x", "x" * 40 + "/" + "y" * 55],
)
def test_hub_style_repo_ids_are_accepted(repo_id: str) -> None:
    validate_repo_id(repo_id)


def test_the_validator_raises_a_validation_error_not_a_crash_on_odd_input() -> None:
    for value in ("\x00/\x00", "a/b/", "/", "a//b", "\n"):
        with pytest.raises(ValidationError):
            validate_repo_id(value)


def test_other_methods_are_refused(client: Client) -> None:
    assert client.put("/ingest/").status_code == 405
