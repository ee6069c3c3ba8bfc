"""Who may act: each attack of issue 14 (anonymous tracking, foreign namespaces, floods, password guessing,
private repos made public) with the guard on, and a control that shows what the guard stops."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from packages_app import background, ingest, tasks, tracking
from packages_app.devhub import DEVHUB_TOKEN, PRIVATE_REPO, QWEN35_REPO
from packages_app.models import ActionLog, Package, PackageFile, Revision
from packages_app.web import access
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

REPO = "meshllm/Qwen3-235B-A22B-UD-Q4_K_XL-layers"
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    cache.clear()  # rate-limit and login-failure counters live there


@pytest.fixture
def tracked(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[str]:
    """A broker is configured (so the view enqueues in the request) and request_track records its calls."""
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    calls: list[str] = []

    real = tracking.request_track

    def recording_track(repo_id: str) -> Any:
        calls.append(repo_id)
        return real(repo_id)

    monkeypatch.setattr(tracking, "request_track", recording_track)
    return calls


def reader_client() -> Client:
    user = User.objects.create_user("rita", password=PASSWORD)
    client = Client()
    client.force_login(user)
    return client


# --- tracking ----------------------------------------------------------------------------------------


def test_an_anonymous_post_tracks_nothing_and_is_sent_to_the_login_page(
    client: Client, tracked: list[str]
) -> None:
    response = client.post("/ingest/", {"repo_id": REPO})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
    assert tracked == [] and not ActionLog.objects.exists()


def test_an_operator_tracks_and_the_action_log_says_who(operator_client: Client, tracked: list[str]) -> None:
    response = operator_client.post("/ingest/", {"repo_id": REPO})
    assert response.status_code == 302 and tracked == [REPO]
    entry = ActionLog.objects.get()
    assert (entry.username, entry.action, entry.target) == ("olga", "track", REPO)


def test_a_signed_in_reader_without_the_permission_gets_403(tracked: list[str]) -> None:
    response = reader_client().post("/ingest/", {"repo_id": REPO})
    assert response.status_code == 403 and "packages_app.track_package" in response.content.decode()
    assert tracked == []


def test_an_operator_may_not_track_outside_the_configured_namespaces(
    operator_client: Client, tracked: list[str], settings: Any
) -> None:
    settings.MESHDASH_TRACK_NAMESPACES = ["meshllm"]
    response = operator_client.post("/ingest/", {"repo_id": "attacker/junk-layers"})
    assert response.status_code == 400
    assert "Only packages of meshllm may be tracked here, not attacker/" in response.content.decode()
    assert tracked == []


def test_a_superuser_may_track_any_namespace(tracked: list[str], settings: Any) -> None:
    settings.MESHDASH_TRACK_NAMESPACES = ["meshllm"]
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=PASSWORD))
    assert client.post("/ingest/", {"repo_id": "elsewhere/model-layers"}).status_code == 302
    assert tracked == ["elsewhere/model-layers"]


def test_tracking_is_rate_limited_per_user(
    operator_client: Client, tracked: list[str], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MESHDASH_TRACK_RATE_LIMIT = 3
    monkeypatch.setattr(access.time, "time", lambda: 1_800_000_000.0)  # one hourly window throughout
    codes = [
        operator_client.post("/ingest/", {"repo_id": f"meshllm/p{i}-layers"}).status_code for i in range(5)
    ]
    assert codes == [302, 302, 302, 429, 429]
    assert len(tracked) == 3
    other = Client()
    other.force_login(User.objects.create_superuser("root", password=PASSWORD))
    assert other.post("/ingest/", {"repo_id": "meshllm/p9-layers"}).status_code == 302  # its own count


def test_without_the_limit_the_same_flood_is_all_tracked(
    operator_client: Client, tracked: list[str], settings: Any
) -> None:
    settings.MESHDASH_TRACK_RATE_LIMIT = 0
    for i in range(5):
        operator_client.post("/ingest/", {"repo_id": f"meshllm/p{i}-layers"})
    assert len(tracked) == 5


# --- untrack, delete, re-ingest ------------------------------------------------------------------------


def package_with_files(files: int = 3) -> Package:
    package = f.make_package("meshllm/junk-layers")
    revision = f.make_revision(package, "consistent-no-mtp")
    PackageFile.objects.bulk_create(PackageFile(revision=revision, path=f"x/{i}.gguf") for i in range(files))
    return package


def test_an_operator_untracks_a_package_and_what_was_ingested_stays(operator_client: Client) -> None:
    package = package_with_files()
    response = operator_client.post("/packages/meshllm/junk-layers/untrack")
    assert response.status_code == 302
    package.refresh_from_db()
    assert package.tracked is False and package.revisions.count() == 1
    assert ActionLog.objects.get().action == "untrack"


def test_untrack_is_post_only_and_not_for_anonymous_visitors(client: Client, operator_client: Client) -> None:
    package_with_files()
    assert operator_client.get("/packages/meshllm/junk-layers/untrack").status_code == 405
    assert client.post("/packages/meshllm/junk-layers/untrack").status_code == 302
    assert Package.objects.get().tracked is True


def test_delete_asks_for_confirmation_then_removes_revisions_and_files(operator_client: Client) -> None:
    package_with_files(3)
    page = operator_client.get("/packages/meshllm/junk-layers/delete")
    assert page.status_code == 200
    assert "its 1 revisions and their 3 files" in page.content.decode() and Package.objects.exists()
    response = operator_client.post("/packages/meshllm/junk-layers/delete")
    assert response.status_code == 302 and response["Location"] == "/"
    assert not Package.objects.exists() and not Revision.objects.exists() and not PackageFile.objects.exists()
    entry = ActionLog.objects.get()
    assert (entry.action, entry.target, entry.detail) == (
        "delete",
        "meshllm/junk-layers",
        "1 revisions, 3 files",
    )


def test_delete_without_the_csrf_token_is_refused(operator: User) -> None:
    package_with_files()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post("/packages/meshllm/junk-layers/delete").status_code == 403
    assert Package.objects.exists()


def test_a_reader_cannot_delete(client: Client) -> None:
    package_with_files()
    assert reader_client().post("/packages/meshllm/junk-layers/delete").status_code == 403
    assert client.post("/packages/meshllm/junk-layers/delete").status_code == 302  # to the login page
    assert Package.objects.exists()


def test_reingest_queues_every_idle_revision_with_a_broker(operator_client: Client, settings: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    package = f.make_package("meshllm/junk-layers")
    done = f.make_revision(package, "consistent-no-mtp")
    f.make_revision(package, "", status=Revision.Status.RUNNING, latest=False)
    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit") as enqueue:
        response = operator_client.post("/packages/meshllm/junk-layers/reingest")
    assert response.status_code == 302
    enqueue.assert_called_once_with("meshllm/junk-layers", done.commit_sha)
    done.refresh_from_db()
    assert done.status == "queued" and ActionLog.objects.get().action == "reingest"


def test_reingest_without_a_broker_hands_the_enqueues_to_the_background_pool(
    operator_client: Client, settings: Any
) -> None:
    settings.CELERY_BROKER_URL = ""  # eager: an ingest enqueued in the request would run in it
    package = f.make_package("meshllm/junk-layers")
    done = f.make_revision(package, "consistent-no-mtp")
    with mock.patch.object(background, "submit") as submit:
        response = operator_client.post("/packages/meshllm/junk-layers/reingest")
    assert response.status_code == 302
    work, *args = submit.call_args.args
    assert args == ["meshllm/junk-layers", [done.commit_sha]]
    with mock.patch.object(tasks.ingest_revision_task, "delay") as delay:
        work(*args)  # what the pool runs once the request has committed
    delay.assert_called_once_with("meshllm/junk-layers", done.commit_sha)


def test_the_package_page_shows_operator_buttons_only_to_operators(
    client: Client, operator_client: Client
) -> None:
    package_with_files()
    assert "Re-ingest" not in client.get("/packages/meshllm/junk-layers/").content.decode()
    body = operator_client.get("/packages/meshllm/junk-layers/").content.decode()
    assert "Re-ingest" in body and "Untrack" in body and "Delete…" in body


# --- logging in ------------------------------------------------------------------------------------


def login(client: Client, password: str, username: str = "olga") -> int:
    return client.post("/accounts/login/", {"username": username, "password": password}).status_code


def test_the_login_page_signs_an_operator_in(client: Client, operator: User) -> None:
    assert client.get("/accounts/login/").status_code == 200
    assert login(client, PASSWORD) == 302
    assert "olga" in client.get("/").content.decode()


def test_password_guessing_is_locked_out_even_for_the_right_password(
    client: Client, operator: User, settings: Any
) -> None:
    settings.MESHDASH_LOGIN_FAILURE_LIMIT = 5
    assert [login(client, f"guess-{i}") for i in range(5)] == [200] * 5
    response = client.post("/accounts/login/", {"username": "olga", "password": PASSWORD})
    assert response.status_code == 200 and "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_without_the_throttle_guessing_goes_on_and_the_right_password_works(
    client: Client, operator: User, settings: Any
) -> None:
    settings.MESHDASH_LOGIN_FAILURE_LIMIT = 0
    assert [login(client, f"guess-{i}") for i in range(20)] == [200] * 20
    assert login(client, PASSWORD) == 302


def test_guessing_from_one_address_across_usernames_is_locked_out(client: Client, settings: Any) -> None:
    settings.MESHDASH_LOGIN_FAILURE_LIMIT = 5
    User.objects.create_user("victim", password=PASSWORD)
    for i in range(5):
        login(client, "wrong", username=f"user{i}")
    assert login(client, PASSWORD, username="victim") == 200


# --- reading -------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/", "/ingest/", "/packages/meshllm/junk-layers/"])
def test_with_public_read_off_pages_send_anonymous_visitors_to_the_login_page(
    client: Client, settings: Any, url: str
) -> None:
    package_with_files()
    settings.MESHDASH_PUBLIC_READ = False
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    settings.MESHDASH_PUBLIC_READ = True  # the control: the same page, public
    assert client.get(url).status_code == 200


def test_with_public_read_off_the_read_api_answers_401_json(client: Client, settings: Any) -> None:
    settings.MESHDASH_PUBLIC_READ = False
    response = client.get("/api/v1/packages")
    assert response.status_code == 401 and "Sign in first" in response.json()["error"]
    assert reader_client().get("/api/v1/packages").status_code == 200


def test_with_public_read_off_nodes_still_reach_their_endpoints(client: Client, settings: Any) -> None:
    settings.MESHDASH_PUBLIC_READ = False
    assert client.get("/api/v1/ping").status_code == 200
    assert client.get("/accounts/login/").status_code == 200
    # A report without a token is refused by the endpoint itself (401 + its own message), not redirected.
    response = client.post("/api/v1/reports", b"{}", content_type="application/json")
    assert response.status_code == 401 and "Sign in first" not in response.content.decode()


# --- private packages ----------------------------------------------------------------------------


@pytest.fixture
def private_package() -> Package:
    package = f.make_package(PRIVATE_REPO)
    f.make_revision(package, "undeclared-mtp")
    f.make_revision(f.make_package("meshllm/public-layers"), "consistent-no-mtp")
    Package.objects.filter(pk=package.pk).update(private=True)
    return package


PRIVATE_PATH = "/packages/" + PRIVATE_REPO + "/"


def test_a_private_package_is_invisible_to_anonymous_readers_everywhere(
    client: Client, private_package: Package
) -> None:
    name = PRIVATE_REPO.split("/")[1]
    assert name not in client.get("/").content.decode()
    assert client.get(PRIVATE_PATH).status_code == 404
    assert client.get(PRIVATE_PATH + "diff").status_code == 404
    listing = client.get("/api/v1/packages").json()
    assert listing["count"] == 1 and listing["facets"]["verdict"]["undeclared-mtp"] == 0
    assert client.get("/api/v1/packages/" + PRIVATE_REPO).status_code == 404
    assert name not in client.get("/ingest/").content.decode()
    assert reader_client().get(PRIVATE_PATH).status_code == 404  # signed in is not enough


def test_an_operator_sees_the_private_package_everywhere(
    operator_client: Client, private_package: Package
) -> None:
    assert PRIVATE_REPO.split("/")[1] in operator_client.get("/").content.decode()
    assert operator_client.get(PRIVATE_PATH).status_code == 200
    listing = operator_client.get("/api/v1/packages").json()
    assert listing["count"] == 2 and listing["facets"]["verdict"]["undeclared-mtp"] == 1


def test_the_same_package_not_marked_private_is_public(client: Client, private_package: Package) -> None:
    Package.objects.filter(pk=private_package.pk).update(private=False)
    assert client.get(PRIVATE_PATH).status_code == 200
    assert client.get("/api/v1/packages").json()["count"] == 2


def test_a_sync_with_a_token_marks_a_private_repo_private_and_a_public_one_not(hub_source: Any) -> None:
    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit"):
        tracking.sync_package(PRIVATE_REPO, source=hub_source(PRIVATE_REPO, token=DEVHUB_TOKEN))
        tracking.sync_package(QWEN35_REPO, source=hub_source(QWEN35_REPO, token=DEVHUB_TOKEN))
    assert Package.objects.get(repo_id=PRIVATE_REPO).private is True
    assert Package.objects.get(repo_id=QWEN35_REPO).private is False


def test_an_ingest_of_a_pinned_sha_with_a_token_asks_whether_the_repo_is_private(hub_source: Any) -> None:
    source = hub_source(PRIVATE_REPO, token=DEVHUB_TOKEN)
    sha = hub_source(PRIVATE_REPO, token=DEVHUB_TOKEN).resolve_revision(None)
    with mock.patch.object(ingest, "_ingest_claimed"), mock.patch.object(ingest, "link_reports_to_revision"):
        ingest.ingest_revision(PRIVATE_REPO, sha, source=source)
    assert Package.objects.get(repo_id=PRIVATE_REPO).private is True
