"""Private until the Hub says public (issue 22, visitor side, item 1).

A package tracked while the worker is busy or down, or whose every sync fails, has no word from the Hub
about its visibility: it is hidden like a private one on every surface (catalog, counts, facets, CSV, API
list and detail, package pages, fleet pages). The discover listing's ``private`` flag is stored when
tracking. Fleet rows take a node's newest run among those of public packages only. Each attack has its
control: the same rows with the old default (public until a sync says otherwise) leak.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from packages_app import hub, tracking
from packages_app.devhub import DEVHUB_TOKEN, PRIVATE_REPO, QWEN35_REPO
from packages_app.models import NodeRun, Package
from tests import dashboard_factories as f
from tests.migrating import back_to_the_leaf, migrate  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

SECRET = "meshllm/Secret-Model-UD-Q4_K_XL-layers"
SECRET_NAME = SECRET.split("/")[1]
PUBLIC = "meshllm/public-layers"


def text(response: Any) -> str:
    return response.content.decode()


def secret_with_a_revision(private: bool | None) -> Package:
    """The secret package with an ingested revision (so it has a verdict to count) and a failed sync
    (so the ingest page lists it), and a public one; a node reported running both."""
    package = f.make_package(SECRET)
    secret = f.make_revision(package, "undeclared-mtp")
    public = f.make_revision(f.make_package(PUBLIC), "consistent-no-mtp")
    node = f.make_node("gpu-box")  # it ran both
    for revision in (secret, public):
        f.make_report(node, revision, 4.0, at=timezone.now())
    Package.objects.filter(pk=package.pk).update(private=private, sync_error=f"{SECRET}@main: 503")
    package.refresh_from_db()
    return package


def leaks(client: Client) -> dict[str, bool]:
    """On which surface an anonymous reader learns of the secret package."""
    listing = client.get("/api/v1/packages").json()
    rows = list(csv.DictReader(io.StringIO(text(client.get("/catalog.csv")))))
    nodes = text(client.get("/nodes/"))
    return {
        "catalog page": SECRET_NAME in text(client.get("/")),
        "catalog search": SECRET_NAME in text(client.get("/", {"q": "Secret"})),
        "api list": any(p["repo_id"] == SECRET for p in listing["results"]) or listing["count"] != 1,
        "api facets": listing["facets"]["verdict"]["undeclared-mtp"] != 0,
        "api detail": client.get("/api/v1/packages/" + SECRET).status_code != 404,
        "package page": client.get(f"/packages/{SECRET}/").status_code != 404,
        "catalog.csv": any(r["repo_id"] == SECRET for r in rows),
        "ingest page": SECRET_NAME in text(client.get("/ingest/")),
        # The node's row names it, or counts it among the rows its page has beyond those listed.
        "nodes page": SECRET_NAME in nodes or " more on " in nodes,
        "node page": SECRET_NAME in text(client.get("/nodes/gpu-box/")),
    }


# --- unknown is hidden ------------------------------------------------------------------------------


def test_a_package_whose_privacy_is_unknown_is_hidden_like_a_private_one_everywhere(client: Client) -> None:
    secret_with_a_revision(private=None)
    assert leaks(client) == dict.fromkeys(leaks(client), False)


def test_control_the_old_default_public_until_a_sync_says_otherwise_leaks_everywhere(client: Client) -> None:
    secret_with_a_revision(private=False)  # what track_package stored before a sync ran
    assert leaks(client) == dict.fromkeys(leaks(client), True)


def test_an_operator_sees_the_package_whose_privacy_is_unknown_and_is_told_so(
    operator_client: Client,
) -> None:
    secret_with_a_revision(private=None)
    assert SECRET_NAME in text(operator_client.get("/"))
    page = text(operator_client.get(f"/packages/{SECRET}/"))
    assert "privacy unknown" in page


def test_a_newly_tracked_package_is_hidden_until_a_sync_asks_the_hub(client: Client) -> None:
    package = tracking.track_package(SECRET)  # the worker is down: no sync ran
    assert package.private is None
    assert client.get("/api/v1/packages/" + SECRET).status_code == 404
    assert SECRET_NAME not in text(client.get("/")) and SECRET_NAME not in text(client.get("/catalog.csv"))


class FailingSource:
    """The Hub answering 503 to every call, as a real HubSource would raise it after its retries."""

    private: bool | None = None
    calls = 0

    def resolve_revision(self, revision: str | None) -> str:
        FailingSource.calls += 1
        raise hub.HubUnavailable(f"{SECRET}@main: 503 Service Unavailable", retry_after=5)


def test_a_sync_failing_with_retryable_errors_keeps_the_package_hidden_through_every_retry(
    client: Client,
) -> None:
    tracking.track_package(SECRET)
    for _attempt in range(4):
        with pytest.raises(hub.HubUnavailable):
            tracking.sync_package(SECRET, source=FailingSource())  # type: ignore[arg-type]
        assert Package.objects.get(repo_id=SECRET).private is None
        assert client.get("/api/v1/packages/" + SECRET).status_code == 404
        assert client.get(f"/packages/{SECRET}/").status_code == 404
    assert Package.objects.get(repo_id=SECRET).sync_error.startswith(SECRET)


def test_a_sync_that_reads_the_hub_makes_a_public_repo_public_and_a_private_one_private(
    client: Client, hub_source: Any
) -> None:
    tracking.track_package(QWEN35_REPO)
    tracking.track_package(PRIVATE_REPO)
    from unittest import mock

    from packages_app import tasks

    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit"):
        tracking.sync_package(QWEN35_REPO, source=hub_source(QWEN35_REPO, token=DEVHUB_TOKEN))
        tracking.sync_package(PRIVATE_REPO, source=hub_source(PRIVATE_REPO, token=DEVHUB_TOKEN))
    assert Package.objects.get(repo_id=QWEN35_REPO).private is False
    assert Package.objects.get(repo_id=PRIVATE_REPO).private is True
    assert client.get("/api/v1/packages/" + QWEN35_REPO).status_code == 200
    assert client.get("/api/v1/packages/" + PRIVATE_REPO).status_code == 404


def test_a_repo_info_that_does_not_say_leaves_the_privacy_unknown() -> None:
    class Info:
        sha = "a" * 40
        private = None

    source = hub.HubSource(SECRET, endpoint="https://hub.invalid")
    source.api.repo_info = lambda *a, **k: Info()  # type: ignore[method-assign]
    source.resolve_revision(None)
    assert source.private is None


# --- the discover listing's flag --------------------------------------------------------------------


def test_discover_stores_the_listings_private_flag_when_it_tracks(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = {SECRET: True, PUBLIC: False, "meshllm/Quiet-layers": None}
    monkeypatch.setattr(hub, "namespace_packages", lambda namespace, on_skip=None: listing)
    found = tracking.discover_packages(["meshllm"], None)
    assert found.tracked == sorted(listing)
    stored = dict(Package.objects.values_list("repo_id", "private"))
    assert stored == {SECRET: True, PUBLIC: False, "meshllm/Quiet-layers": None}
    assert client.get("/api/v1/packages").json()["count"] == 1  # only the one the Hub says is public


def test_a_later_listing_hides_a_package_gone_private_but_never_unhides_a_private_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Package.objects.create(repo_id=SECRET, private=False)
    Package.objects.create(repo_id=PUBLIC, private=True)
    listing = {SECRET: True, PUBLIC: False}
    monkeypatch.setattr(hub, "namespace_packages", lambda namespace, on_skip=None: listing)
    tracking.discover_packages(["meshllm"], None)
    assert dict(Package.objects.values_list("repo_id", "private")) == {SECRET: True, PUBLIC: True}


def test_the_namespace_listing_says_which_repos_are_private(
    devhub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", DEVHUB_TOKEN)
    listed = hub.namespace_packages("meshllm", endpoint=devhub.url)
    assert listed[PRIVATE_REPO] is True and listed[QWEN35_REPO] is False
    monkeypatch.delenv("HF_TOKEN")
    assert PRIVATE_REPO not in hub.namespace_packages("meshllm", endpoint=devhub.url)


# --- fleet rows ---------------------------------------------------------------------------------------


def node_with_a_newer_private_run(private: bool | None) -> None:
    """mac-studio served a public package; its agent's newest run is of the secret package."""
    f.qwen35_fleet(timezone.now())
    node = f.Node.objects.get(name="mac-studio")
    secret = secret_with_a_revision(private=private)
    older = NodeRun.objects.create(
        node=node, run_id="r-public", version="0.61.2", devices=[{"name": "Metal"}]
    )
    NodeRun.objects.filter(pk=older.pk).update(updated_at=timezone.now() - timezone.timedelta(hours=1))
    NodeRun.objects.create(
        node=node,
        run_id="r-secret",
        repo_id=SECRET,
        revision=secret.revisions.get(),
        version="0.99.7-secret",
        devices=[{"name": "H100-SECRET"}],
    )


@pytest.mark.parametrize("private", [True, None])
def test_a_nodes_newest_run_of_a_hidden_package_shows_nothing_to_anonymous_readers(
    client: Client, private: bool | None
) -> None:
    node_with_a_newer_private_run(private)
    for page in ("/nodes/", "/nodes/mac-studio/"):
        body = text(client.get(page))
        assert "0.99.7-secret" not in body and "H100-SECRET" not in body and SECRET_NAME not in body
    assert "0.61.2" in text(client.get("/nodes/mac-studio/"))  # the newest run anyone may see


def test_a_run_naming_a_repo_no_stored_revision_confirms_shows_nothing_to_anonymous_readers(
    client: Client,
) -> None:
    f.qwen35_fleet(timezone.now())
    node = f.Node.objects.get(name="mac-studio")
    NodeRun.objects.create(node=node, run_id="r-x", repo_id=SECRET, version="0.99.7-secret")
    assert "0.99.7-secret" not in text(client.get("/nodes/mac-studio/"))


def test_control_the_same_run_of_a_public_package_shows_its_version_and_devices(client: Client) -> None:
    node_with_a_newer_private_run(False)
    body = text(client.get("/nodes/mac-studio/"))
    assert "0.99.7-secret" in body and "H100-SECRET" in body


def test_an_operator_sees_the_nodes_newest_run_of_the_private_package(operator_client: Client) -> None:
    node_with_a_newer_private_run(True)
    body = text(operator_client.get("/nodes/mac-studio/"))
    assert "0.99.7-secret" in body and "H100-SECRET" in body


# --- the migration -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_the_migration_makes_a_public_no_sync_confirmed_unknown_and_going_back_hides_it() -> None:
    apps = migrate([("packages_app", "0016_h23_fix_proposals")])
    package, revision = apps.get_model("packages_app", "Package"), apps.get_model("packages_app", "Revision")
    now = timezone.now()
    package.objects.create(repo_id="meshllm/never-synced-layers")
    package.objects.create(repo_id="meshllm/failing-layers", last_synced_at=now, sync_error="503")
    package.objects.create(repo_id="meshllm/synced-empty-layers", last_synced_at=now)
    failing_since = package.objects.create(
        repo_id="meshllm/once-synced-layers", last_synced_at=now, sync_error="503"
    )
    revision.objects.create(package=failing_since, commit_sha="a" * 40)
    package.objects.create(repo_id="meshllm/private-layers", private=True)
    apps = migrate([("packages_app", "0017_h22web_privacy_unknown")])
    after = dict(apps.get_model("packages_app", "Package").objects.values_list("repo_id", "private"))
    assert after == {
        "meshllm/never-synced-layers": None,
        "meshllm/failing-layers": None,
        "meshllm/synced-empty-layers": False,
        "meshllm/once-synced-layers": False,
        "meshllm/private-layers": True,
    }
    apps = migrate([("packages_app", "0016_h23_fix_proposals")])
    back = dict(apps.get_model("packages_app", "Package").objects.values_list("repo_id", "private"))
    assert back["meshllm/never-synced-layers"] is True and back["meshllm/synced-empty-layers"] is False
