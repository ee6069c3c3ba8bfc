"""The fix pull request from the package page: who may, what the page says, and the guards, each with a
control (issue 23 items 1, 3 and 6). The Hub is a devhub of the test's own (tests.test_fixes.writable)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import Client

from packages_app import hub, ingest
from packages_app.devhub import QWEN35_FIRST_SHA, QWEN35_REPO, QWEN38_REPO
from packages_app.models import ActionLog, FixProposal
from packages_app.web import access
from tests.test_fixes import ingested, run, writable  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db
OWNER, NAME = QWEN38_REPO.split("/")
PAGE = f"/packages/{OWNER}/{NAME}/"
PROPOSE = f"/packages/{OWNER}/{NAME}/propose-fix"


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    cache.clear()


def signed_in(perms: tuple[str, ...] = ("propose_fix",), **client_args: Any) -> tuple[Client, User]:
    user = User.objects.create_user(f"u{User.objects.count()}", password="correct horse battery staple")
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    client = Client(**client_args)
    client.force_login(user)
    return client, user


def propose(client: Client, capture: Any, sha: str) -> Any:
    with capture(execute=True):
        return client.post(PROPOSE, {"revision": sha})


def test_a_user_with_propose_fix_reviews_the_diff_and_opens_the_pull_request(
    writable: Any,  # noqa: F811 - the fixture imported above
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    devhub, _ = writable
    base = ingested(devhub).latest_revision
    assert base is not None
    client, user = signed_in()
    page = client.get(PAGE).content.decode()
    assert "Open a pull request on the Hub" in page and "authored by meshdash-bot" in page
    review = client.get(PROPOSE).content.decode()
    assert "+      &quot;default&quot;: &quot;mtp&quot;," in review and base.commit_sha in review
    assert "csrfmiddlewaretoken" in review and "serves with MTP" in review

    response = propose(client, django_capture_on_commit_callbacks, base.commit_sha)
    assert response.status_code == 302 and response["Location"].endswith("#fix")
    [pr] = devhub.discussions[QWEN38_REPO]
    assert pr.base_sha == base.commit_sha and pr.author == "meshdash-bot"
    proposal = FixProposal.objects.get()
    assert proposal.status == FixProposal.Status.OPEN and proposal.proposed_by == user
    log = ActionLog.objects.get(action=ActionLog.Action.PROPOSE_FIX)
    assert (log.username, log.target) == (user.username, QWEN38_REPO)

    # The page and the catalog row say so; the button is gone while it is open.
    page = client.get(PAGE).content.decode()
    assert "fix proposed: PR #1 (open)" in page and "Open a pull request on the Hub" not in page
    assert "fix proposed: PR #1 (open)" in client.get("/").content.decode()

    # A second click gets the same pull request, and nothing is sent.
    again = propose(client, django_capture_on_commit_callbacks, base.commit_sha)
    assert again.status_code == 302 and len(devhub.discussions[QWEN38_REPO]) == 1
    assert FixProposal.objects.count() == 1


def test_without_the_permission_it_is_403_and_nothing_is_sent(
    writable: Any,  # noqa: F811 - the fixture imported above
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    devhub, _ = writable
    base = ingested(devhub).latest_revision
    assert base is not None
    client, _ = signed_in(perms=("track_package", "reingest_package"))
    assert "Open a pull request on the Hub" not in client.get(PAGE).content.decode()
    assert client.get(PROPOSE).status_code == 403
    assert propose(client, django_capture_on_commit_callbacks, base.commit_sha).status_code == 403
    anonymous = Client().post(PROPOSE, {"revision": base.commit_sha})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert QWEN38_REPO not in devhub.discussions and not FixProposal.objects.exists()
    # control: the permission is what it takes
    allowed, _ = signed_in()
    assert propose(allowed, django_capture_on_commit_callbacks, base.commit_sha).status_code == 302
    assert len(devhub.discussions[QWEN38_REPO]) == 1


def test_the_form_needs_the_csrf_token(writable: Any) -> None:  # noqa: F811
    devhub, _ = writable
    base = ingested(devhub).latest_revision
    assert base is not None
    client, _ = signed_in(enforce_csrf_checks=True)
    assert client.post(PROPOSE, {"revision": base.commit_sha}).status_code == 403
    assert not FixProposal.objects.exists()
    # control: with the form's token it is taken
    client.get(PROPOSE)
    token = client.cookies["csrftoken"].value
    response = client.post(PROPOSE, {"revision": base.commit_sha, "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and FixProposal.objects.count() == 1


def test_the_rate_limit_stops_a_user_past_it(writable: Any, settings: Any) -> None:  # noqa: F811
    devhub, _ = writable
    base = ingested(devhub).latest_revision
    assert base is not None
    settings.MESHDASH_PROPOSE_RATE_LIMIT = 1
    client, user = signed_in()
    assert access.propose_rate_refusal(user) is None  # the one request this hour, spent
    response = client.post(PROPOSE, {"revision": base.commit_sha}, follow=True)
    assert "pull requests this hour" in response.content.decode() and not FixProposal.objects.exists()
    # control: another user is under the limit
    other, _ = signed_in()
    assert other.post(PROPOSE, {"revision": base.commit_sha}).status_code == 302
    assert FixProposal.objects.count() == 1


def test_a_v1_package_gets_no_button_but_the_sentence_to_republish(writable: Any) -> None:  # noqa: F811
    devhub, _ = writable
    source = hub.HubSource(QWEN35_REPO, endpoint=devhub.url, max_retries=1)
    ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=source)
    client, _ = signed_in()
    owner, name = QWEN35_REPO.split("/")
    page = client.get(f"/packages/{owner}/{name}/", {"revision": QWEN35_FIRST_SHA}).content.decode()
    assert "No pull request for a v1 package" in page and "republish it as package-v2" in page.lower()
    assert "Open a pull request on the Hub" not in page
    refused = client.post(f"/packages/{owner}/{name}/propose-fix", {"revision": QWEN35_FIRST_SHA})
    assert refused.status_code == 409 and "package-v2" in refused.content.decode()
    code, _, err = run("propose_fix", QWEN35_REPO, "--revision", QWEN35_FIRST_SHA)
    assert code == 2 and "schema v1" in err
    assert QWEN35_REPO not in devhub.discussions and not FixProposal.objects.exists()


def test_the_admin_lists_the_proposals(writable: Any, admin_client: Client) -> None:  # noqa: F811
    devhub, _ = writable
    assert run("propose_fix", QWEN38_REPO)[0] == 2  # nothing ingested yet: nothing to propose
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    proposal = FixProposal.objects.get()
    listing = admin_client.get("/admin/packages_app/fixproposal/")
    assert listing.status_code == 200 and QWEN38_REPO in listing.content.decode()
    assert admin_client.get(f"/admin/packages_app/fixproposal/{proposal.pk}/change/").status_code == 200


def test_a_forged_discussion_event_only_makes_meshdash_ask_the_hub(
    writable: Any,  # noqa: F811 - the fixture imported above
    client: Client,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from tests.test_fixes import SECRET

    devhub, _ = writable
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    forged = {
        "event": {"action": "update", "scope": "discussion"},
        "repo": {"type": "model", "name": QWEN38_REPO, "headSha": "f" * 40},
        "discussion": {"num": 1, "isPullRequest": True, "status": "merged"},
    }
    headers = {"X-Webhook-Secret": SECRET}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/hooks/hub", forged, content_type="application/json", headers=headers)
    assert response.status_code == 202
    proposal = FixProposal.objects.get()
    assert proposal.status == FixProposal.Status.OPEN and proposal.checked_at is not None  # the Hub says open
    # A PR meshdash did not open is acknowledged and ignored.
    other = forged | {"discussion": {"num": 7, "isPullRequest": True}}
    ignored = client.post("/api/v1/hooks/hub", other, content_type="application/json", headers=headers)
    assert ignored.status_code == 200 and ignored.json()["queued"] is False
    # control: when the Hub has merged it, the same event brings the merge in
    from huggingface_hub import HfApi

    from packages_app.devhub import DEVHUB_TOKEN

    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/api/v1/hooks/hub", forged, content_type="application/json", headers=headers)
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.MERGED


def test_a_superseded_revision_is_offered_no_pull_request_but_the_revision_to_move_to(
    writable: Any,  # noqa: F811 - the fixture imported above
) -> None:
    from packages_app.devhub import DEMO_PACKAGES, NEMOTRON_REPO

    devhub, _ = writable
    ingested(devhub, NEMOTRON_REPO)
    first, _, newest = next(p for p in DEMO_PACKAGES if p.repo_id == NEMOTRON_REPO).revisions
    owner, name = NEMOTRON_REPO.split("/")
    reason = f"{newest.sha[:8]} serves with MTP: move nodes still on {first.sha[:8]} to it"
    client, _ = signed_in()
    page = client.get(f"/packages/{owner}/{name}/", {"revision": first.sha}).content.decode()
    assert reason in page and "Open a pull request on the Hub" not in page
    refused = client.post(f"/packages/{owner}/{name}/propose-fix", {"revision": first.sha})
    assert refused.status_code == 409 and reason in refused.content.decode()
    code, _, err = run("propose_fix", NEMOTRON_REPO, "--revision", first.sha[:8])
    assert code == 2 and reason in err
    assert NEMOTRON_REPO not in devhub.discussions and not FixProposal.objects.exists()
    # control: the head of a package whose head needs the fix is offered the PR (Qwen3.8's only v2 fix)
    ingested(devhub)
    assert "Open a pull request on the Hub" in client.get(PAGE).content.decode()


def test_a_revision_that_is_not_the_head_gets_no_pull_request_the_head_does(
    writable: Any,  # noqa: F811 - the fixture imported above
) -> None:
    from huggingface_hub import HfApi

    from packages_app.devhub import DEVHUB_TOKEN, MANIFEST_PATH

    devhub, _ = writable
    old = ingested(devhub).latest_revision
    assert old is not None
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).create_commit(
        QWEN38_REPO, [hub_add(MANIFEST_PATH + ".notes", b"x")], commit_message="notes"
    )
    head = ingested(devhub).latest_revision
    assert head is not None and head.pk != old.pk and head.headline == old.headline  # still MTP unused
    code, _, err = run("propose_fix", QWEN38_REPO, "--revision", old.commit_sha)
    assert code == 2 and f"{head.short_sha} is" in err and "made from the head it improves" in err
    assert run("propose_fix", QWEN38_REPO)[0] == 0  # control: from the head it goes
    assert devhub.discussions[QWEN38_REPO][0].base_sha == head.commit_sha


def hub_add(path: str, content: bytes) -> Any:
    from huggingface_hub import CommitOperationAdd

    return CommitOperationAdd(path, content)


def test_sync_from_the_hub_fetches_new_commits_and_pr_states_at_once(
    writable: Any,  # noqa: F811 - the fixture imported above
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from huggingface_hub import HfApi

    from packages_app.devhub import DEVHUB_TOKEN

    devhub, _ = writable
    package = ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    client, user = signed_in(perms=("reingest_package",))
    page = client.get(PAGE).content.decode()
    assert "Sync from the Hub" in page and "Re-ingest" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{PAGE}sync", follow=True)
    assert "Syncing" in response.content.decode()
    proposal = FixProposal.objects.get()
    head = devhub.repos[("model", QWEN38_REPO)].branches["main"]
    package.refresh_from_db()
    assert package.latest_revision is not None and package.latest_revision.commit_sha == head  # new commit in
    assert (
        proposal.status == FixProposal.Status.MERGED and proposal.landed_headline
    )  # the PR state, read back
    assert proposal.verdict_comment_id  # and said on the PR
    log = ActionLog.objects.get(action=ActionLog.Action.SYNC)
    assert (log.username, log.target) == (user.username, QWEN38_REPO)


def test_sync_needs_the_permission_and_is_rate_limited(
    writable: Any,  # noqa: F811 - the fixture imported above
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    devhub, _ = writable
    ingested(devhub)
    viewer, _ = signed_in(perms=("propose_fix",))
    assert "Sync from the Hub" not in viewer.get(PAGE).content.decode()
    assert viewer.post(f"{PAGE}sync").status_code == 403
    assert Client().post(f"{PAGE}sync").status_code == 302  # to the login page
    settings.MESHDASH_SYNC_RATE_LIMIT = 1
    operator, _ = signed_in(perms=("reingest_package",))
    with django_capture_on_commit_callbacks(execute=False):
        assert operator.post(f"{PAGE}sync").status_code == 302
        refused = operator.post(f"{PAGE}sync", follow=True)
    assert "You synced 1 times this hour" in refused.content.decode()
    assert ActionLog.objects.filter(action=ActionLog.Action.SYNC).count() == 1
