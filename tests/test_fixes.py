"""From finding to fix (issue 23): the patched manifest as a pull request on the Hub, followed to the fixed
revision. Driven through the real huggingface_hub client against a devhub of the test's own (its writes
stay in its memory), the real ingest, and the webhook endpoint."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from huggingface_hub import CommitOperationAdd, HfApi

from packages_app import fix_following, fix_plans, fix_proposals, hub, ingest, tracking
from packages_app.devhub import DEVHUB_TOKEN, MANIFEST_PATH, QWEN38_REPO, DevHub
from packages_app.models import FixProposal, Package, Revision
from packages_app.verdicts import Status

pytestmark = pytest.mark.django_db
BOT = "hf_meshdash_bot_write_token_for_tests"
SECRET = "a-webhook-secret-of-some-length"


@pytest.fixture
def writable(demo_catalog: Path, settings: Any) -> Iterator[tuple[DevHub, list[dict[str, Any]]]]:
    events: list[dict[str, Any]] = []
    devhub = DevHub(demo_catalog, users={BOT: "meshdash-bot"}, on_event=events.append).start()
    settings.MESHDASH_HUB_DEV = True
    settings.HF_ENDPOINT = devhub.url
    settings.MESHDASH_HUB_WRITE_TOKEN = BOT
    settings.MESHDASH_HUB_WRITE_AUTHOR = "meshdash-bot"
    settings.MESHDASH_WEBHOOK_SECRET = SECRET
    settings.MESHDASH_NAMESPACES = ["meshllm"]
    settings.CELERY_BROKER_URL = "memory://"  # not eager mode: the webhook enqueues, Celery runs it eagerly
    yield devhub, events
    devhub.stop()


def ingested(devhub: DevHub, repo_id: str = QWEN38_REPO) -> Package:
    source = hub.HubSource(repo_id, endpoint=devhub.url, max_retries=1)
    for rev in tracking.sync_package(repo_id, source):
        ingest.ingest_revision(repo_id, rev.commit_sha, source=source)
    return Package.objects.get(repo_id=repo_id)


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def deliver(client: Client, events: list[dict[str, Any]]) -> list[int]:
    codes = []
    for event in events:
        response = client.post(
            "/api/v1/hooks/hub",
            data=json.dumps(event),
            content_type="application/json",
            headers={"X-Webhook-Secret": SECRET},
        )
        codes.append(response.status_code)
    return codes


def signed_in_proposer() -> Client:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(f"p{User.objects.count()}", password="correct horse battery staple")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=("propose_fix", "reingest_package", "track_package"))
    )
    client = Client()
    client.force_login(user)
    return client


def deliver_all(client: Client, events: list[dict[str, Any]], start: int, capture: Any) -> list[int]:
    """Deliver devhub's webhook payloads from ``start`` on, as the Hub would, until none is left (meshdash's
    own comment on the PR makes one more)."""
    codes: list[int] = []
    while start + len(codes) < len(events):
        with capture(execute=True):
            codes += deliver(client, [events[start + len(codes)]])
    return codes


def test_the_loop_closes_by_itself_propose_merge_webhook_ingest_verified_and_said_on_the_pr(
    writable: Any, eager_tasks: None, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    """Issue 42's loop, with only what a user and the Hub do: an operator opens the PR from the package page,
    a maintainer merges it on the Hub, the Hub's webhooks arrive; nothing is run by hand."""
    devhub, events = writable
    settings.MESHDASH_PUBLIC_URL = "https://meshdash.example.org"
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None and base.headline == Status.MTP_UNUSED
    owner, name = QWEN38_REPO.split("/")
    page = f"/packages/{owner}/{name}/"
    operator = signed_in_proposer()

    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"{page}propose-fix", {"revision": base.commit_sha})
    assert response.status_code == 302
    proposal = FixProposal.objects.get()
    assert proposal.status == FixProposal.Status.OPEN and proposal.pr_number == 1
    assert proposal.pr_url == f"{devhub.url}/{QWEN38_REPO}/discussions/1"
    assert proposal.promised_headline == Status.SERVES_MTP and proposal.base_sha == base.commit_sha

    # On the Hub: a PR made from the audited revision, the patched manifest its only changed file.
    [pr] = devhub.discussions[QWEN38_REPO]
    assert pr.base_sha == base.commit_sha and pr.target == "main" and pr.author == "meshdash-bot"
    record = devhub.repos[("model", QWEN38_REPO)]
    before, after = record.commit(pr.base_sha), record.commit(pr.head_sha)
    assert before is not None and after is not None
    changed = {p for p in set(before.files) | set(after.files) if before.files.get(p) != after.files.get(p)}
    assert changed == {MANIFEST_PATH}
    sent = devhub.store.blob_path(after.files[MANIFEST_PATH].blob).read_text()
    assert sent == (base.audit or {})["suggested_generation"]["patched_manifest"]
    assert record.branches["main"] == base.commit_sha  # never a commit to main
    assert "block 64" in pr.description and base.commit_sha in pr.description
    assert proposal.package_id_before in pr.description and proposal.package_id_after in pr.description
    # The PR's creation is read back (a check), its new ref refs/pr/1 moves no branch (no sync).
    assert deliver_all(operator, events, 0, django_capture_on_commit_callbacks) == [202, 200]

    # A maintainer merges it on the Hub; the Hub's webhooks bring the merged revision in, nothing else does.
    opened = len(events)
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    codes = deliver_all(operator, events, opened, django_capture_on_commit_callbacks)
    merged = Revision.objects.get(package=package, commit_sha=record.branches["main"])
    assert merged.headline == Status.SERVES_MTP and merged.status == Revision.Status.DONE
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.MERGED and proposal.merge_commit == merged.commit_sha
    assert (proposal.landed_headline, proposal.mismatch) == (Status.SERVES_MTP, False)
    package.refresh_from_db()
    assert package.latest_revision == merged

    # meshdash said so on the PR, once: what was promised, what landed, the package page's absolute URL.
    said = [e for e in pr.events if e["type"] == "comment" and e["author"]["name"] == "meshdash-bot"][1:]
    assert len(said) == 1 and proposal.verdict_comment_id == said[0]["id"]
    text = said[0]["data"]["latest"]["raw"]
    assert f"is now at `{merged.commit_sha}`" in text and "**serves with MTP**, as promised" in text
    assert f"https://meshdash.example.org{page}?revision={merged.commit_sha}" in text
    assert codes == [
        202,
        202,
        202,
    ]  # the merge, main's new head, and meshdash's own comment (read back, no repeat)

    # The package page and the catalog row give the verified fix, as the PR does.
    line = f"fix merged: PR #1 landed as {merged.commit_sha[:8]}: serves with MTP, as promised"
    assert line in Client().get(page).content.decode() and line in Client().get("/").content.decode()


def test_a_manifest_changed_by_a_new_audit_while_the_pr_is_open_is_pushed_to_the_same_pr(
    writable: Any, eager_tasks: None, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    from packages_app.audit import fix as fix_rules

    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    owner, name = QWEN38_REPO.split("/")
    operator = signed_in_proposer()
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(f"/packages/{owner}/{name}/propose-fix", {"revision": base.commit_sha})
    proposal = FixProposal.objects.get()
    first = proposal.manifest
    # The writer's window policy changes (a newer mesh-llm writer): same weights, another patched manifest.
    window = {"default": "adaptive", "initial_window": 1, "min_window": 1, "max_window": 2}
    monkeypatch.setattr(fix_rules, "_WRITER_WINDOW", window)
    with django_capture_on_commit_callbacks(execute=True):
        assert operator.post(f"/packages/{owner}/{name}/reingest").status_code == 302
    proposal.refresh_from_db()
    [pr] = devhub.discussions[QWEN38_REPO]  # the same PR, no second one
    assert [e["type"] for e in pr.events].count("commit") == 2 and proposal.pr_head_sha == pr.head_sha
    record = devhub.repos[("model", QWEN38_REPO)]
    head = record.commit(record.pr_refs["refs/pr/1"])
    assert head is not None and head.parents == (pr.events[1]["data"]["oid"],)  # on top of the first commit
    pushed = devhub.store.blob_path(head.files[MANIFEST_PATH].blob).read_text()
    assert pushed == proposal.manifest != first and '"default": "adaptive"' in pushed
    assert proposal.status == FixProposal.Status.OPEN and "Pushed" in proposal.message
    assert FixProposal.objects.count() == 1
    # control: a re-ingest that audits to the same manifest sends nothing
    commits = len(record.commits)
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(f"/packages/{owner}/{name}/reingest")
    assert len(record.commits) == commits and len(devhub.discussions[QWEN38_REPO]) == 1


def test_the_hubs_nothing_changed_reads_as_nothing_to_change(writable: Any, monkeypatch: Any) -> None:
    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    writer = hub.HubWriter(QWEN38_REPO, BOT, endpoint=devhub.url)
    stored = devhub.repos[("model", QWEN38_REPO)].commit(base.commit_sha)
    assert stored is not None
    current = devhub.store.blob_path(stored.files[MANIFEST_PATH].blob).read_bytes()
    assert writer.open_pull_request(base.commit_sha, MANIFEST_PATH, current, "t", "d") is None
    assert QWEN38_REPO not in devhub.discussions  # huggingface_hub made no commit and named no PR
    pr = writer.open_pull_request(base.commit_sha, MANIFEST_PATH, b'{"x": 1}\n', "t", "d")
    assert pr is not None and pr.num == 1
    assert writer.update_pull_request(1, MANIFEST_PATH, b'{"x": 1}\n', "t", "d") is None  # the same bytes
    pushed = writer.update_pull_request(1, MANIFEST_PATH, b'{"x": 2}\n', "t", "d")
    assert pushed == devhub.discussions[QWEN38_REPO][0].head_sha  # control: a change is pushed
    # A proposal whose patched manifest the Hub already holds ends "unneeded", not failed.
    proposal, _ = fix_proposals.request_fix(package, base)
    real = fix_plans.plan(package, base)
    monkeypatch.setattr(fix_proposals, "plan", lambda *_: replace(real, manifest=current.decode()))
    done = fix_proposals.open_fix(proposal, writer=writer)
    assert done.status == FixProposal.Status.UNNEEDED and "Nothing to change" in done.message
    assert done.summary == "fix not needed: the Hub already holds the patched manifest"
    assert len(devhub.discussions[QWEN38_REPO]) == 1


def test_a_landed_headline_other_than_the_promised_one_is_flagged(writable: Any) -> None:
    devhub, _ = writable
    package = ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    proposal = FixProposal.objects.get()
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    fix_following.refresh_fix(proposal)
    assert proposal.status == FixProposal.Status.MERGED and proposal.landed_revision is None  # not ingested
    ingested(devhub)
    Revision.objects.filter(commit_sha=proposal.merge_commit).update(headline=Status.MTP_UNUSED)
    fix_following.settle_revision(Revision.objects.get(commit_sha=proposal.merge_commit).pk)
    proposal.refresh_from_db()
    assert proposal.mismatch is True and "not the promised serves with MTP" in proposal.summary
    assert package.fix_proposals.count() == 1


def test_a_second_attempt_returns_the_open_pull_request(writable: Any) -> None:
    devhub, _ = writable
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    code, out, _ = run("propose_fix", QWEN38_REPO)
    assert code == 0 and out.strip() == f"already open: PR #1 {devhub.url}/{QWEN38_REPO}/discussions/1"
    assert len(devhub.discussions[QWEN38_REPO]) == 1 and FixProposal.objects.count() == 1
    # control: once that PR is closed, a new attempt opens a new one
    proposal = FixProposal.objects.get()
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).change_discussion_status(QWEN38_REPO, 1, "closed")
    assert fix_following.refresh_fix(proposal).status == FixProposal.Status.CLOSED
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    assert len(devhub.discussions[QWEN38_REPO]) == 2


def test_a_moved_head_is_re_audited_first_and_nothing_is_sent(writable: Any) -> None:
    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).create_commit(
        QWEN38_REPO, [CommitOperationAdd("NOTES.md", b"moved\n")], commit_message="Add notes"
    )
    head = devhub.repos[("model", QWEN38_REPO)].branches["main"]
    code, _, err = run("propose_fix", QWEN38_REPO)
    assert code == 3 and f"moved to {head[:12]}" in err and "re-audited" in err
    assert QWEN38_REPO not in devhub.discussions  # nothing sent
    rev = Revision.objects.get(package=package, commit_sha=head)
    assert rev.headline == Status.MTP_UNUSED  # the new head was ingested and audited
    assert FixProposal.objects.get().status == FixProposal.Status.STALE
    # control: now that meshdash has audited the head, the same command opens the PR from it
    code, out, _ = run("propose_fix", QWEN38_REPO)
    assert code == 0 and "opened: PR #1" in out
    assert devhub.discussions[QWEN38_REPO][0].base_sha == head


def test_a_patched_manifest_that_would_not_validate_is_never_sent(writable: Any) -> None:
    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    good = dict(base.audit or {})
    patched = json.loads(good["suggested_generation"]["patched_manifest"])
    patched["package_id"] = "sha256:" + "0" * 64  # no longer the id of what it declares
    bad = good | {
        "suggested_generation": good["suggested_generation"] | {"patched_manifest": json.dumps(patched)}
    }
    Revision.objects.filter(pk=base.pk).update(audit=bad)
    devhub.counters.reset()
    code, _, err = run("propose_fix", QWEN38_REPO)
    assert code == 2 and "does not validate" in err and "nothing is sent" in err
    assert devhub.counters.requests == 0 and QWEN38_REPO not in devhub.discussions
    assert not FixProposal.objects.exists()
    # control: the manifest meshdash wrote is sent
    Revision.objects.filter(pk=base.pk).update(audit=good)
    assert run("propose_fix", QWEN38_REPO)[0] == 0 and len(devhub.discussions[QWEN38_REPO]) == 1


def test_dry_run_prints_the_diff_and_sends_nothing(writable: Any) -> None:
    devhub, _ = writable
    ingested(devhub)
    devhub.counters.reset()
    code, out, _ = run("propose_fix", QWEN38_REPO, "--dry-run")
    assert code == 0 and f"+++ b/{MANIFEST_PATH}" in out and "dry run: nothing sent" in out
    assert "promised headline: serves with MTP (now MTP weights unused)" in out
    assert devhub.counters.requests == 0 and not FixProposal.objects.exists()


def test_no_write_token_no_pull_request(writable: Any, settings: Any) -> None:
    devhub, _ = writable
    ingested(devhub)
    settings.MESHDASH_HUB_WRITE_TOKEN = ""
    code, _, err = run("propose_fix", QWEN38_REPO)
    assert code == 2 and "MESHDASH_HUB_WRITE_TOKEN" in err and QWEN38_REPO not in devhub.discussions


class _Recorder:
    """Two loopback servers: ``evil`` answers every request with a 307 to ``sink``, which records them."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen: list[tuple[str, str, str | None]] = []
        recorder = self

        class Sink(BaseHTTPRequestHandler):
            def do_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                recorder.seen.append((self.command, self.path, self.headers.get("Authorization")))
                body = json.dumps({"id": QWEN38_REPO, "sha": "a" * 40}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_any

            def log_message(self, *args: Any) -> None:
                pass

        class Evil(Sink):
            def do_any(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(307)
                self.send_header("Location", f"{recorder.sink_url}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_any

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (Sink, Evil)]
        for server in self.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.sink_url, self.evil_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in self.servers)

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def redirecting(settings: Any) -> Iterator[_Recorder]:
    settings.MESHDASH_HUB_DEV = True
    recorder = _Recorder()
    yield recorder
    recorder.stop()


def test_the_write_token_never_leaves_the_endpoints_origin(redirecting: _Recorder) -> None:
    writer = hub.HubWriter(QWEN38_REPO, BOT, endpoint=redirecting.evil_url)
    with pytest.raises(hub.HubRefused, match="refused to follow a link"):
        writer.head()
    with pytest.raises(hub.HubRefused, match="refused to follow a link"):
        writer.open_pull_request("b" * 40, MANIFEST_PATH, b"{}", "t", "d")
    assert redirecting.seen == []  # neither the token nor the manifest reached the other origin
    # control: the same client outside the guard follows the redirect to the other origin
    writer.api.repo_info(QWEN38_REPO)
    assert [(m, p) for m, p, _ in redirecting.seen] == [("GET", f"/api/models/{QWEN38_REPO}")]


def test_the_write_client_refuses_plain_http_outside_development(settings: Any) -> None:
    settings.MESHDASH_HUB_DEV = False
    with pytest.raises(hub.HubRefused, match="only https"):
        hub.HubWriter(QWEN38_REPO, BOT, endpoint="http://hub.example")
    hub.HubWriter(QWEN38_REPO, BOT, endpoint="https://hub.example")  # control: https is fine


def test_the_periodic_check_follows_a_merge_the_webhook_never_told(writable: Any, eager_tasks: None) -> None:
    from packages_app import tasks

    devhub, _ = writable
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    proposal = FixProposal.objects.get()
    assert tasks.check_fix_proposals.delay().get() == 1  # open: read back, still open
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.OPEN
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    tasks.check_fix_proposals.delay()
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.MERGED and proposal.landed_revision is None
    ingested(devhub)  # the periodic sync brings the merge commit in; the next check settles it
    tasks.check_fix_proposals.delay()
    proposal.refresh_from_db()
    assert (proposal.landed_headline, proposal.mismatch) == (Status.SERVES_MTP, False)
    assert tasks.check_fix_proposals.delay().get() == 0  # settled: nothing left to check


def test_two_requests_racing_for_one_base_revision_get_one_proposal(writable: Any, monkeypatch: Any) -> None:
    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    first, created = fix_proposals.request_fix(package, base)
    assert created
    # The second request checked before the first one was recorded: the constraint answers for it.
    real, seen = fix_proposals.active_proposal, []

    def first_check_misses(*args: Any) -> FixProposal | None:
        seen.append(args)
        return None if len(seen) == 1 else real(*args)

    monkeypatch.setattr(fix_proposals, "active_proposal", first_check_misses)
    second, created = fix_proposals.request_fix(package, base)
    assert (second.pk, created) == (first.pk, False) and FixProposal.objects.count() == 1
    assert len(seen) == 2  # it missed, hit the constraint, and looked again
    # control: once the first is no longer opening or open, a new one may be recorded
    FixProposal.objects.filter(pk=first.pk).update(status=FixProposal.Status.CLOSED)
    third, created = fix_proposals.request_fix(package, base)
    assert created and third.pk != first.pk


def test_a_refused_token_fails_the_proposal_and_a_later_one_may_go(writable: Any, settings: Any) -> None:
    devhub, _ = writable
    ingested(devhub)
    settings.MESHDASH_HUB_WRITE_TOKEN = "hf_not_a_token_devhub_knows"
    code, _, err = run("propose_fix", QWEN38_REPO)
    assert code == 4 and "the Hub did not take the pull request" in err
    failed = FixProposal.objects.get()
    assert failed.status == FixProposal.Status.FAILED and "refused" in failed.message
    assert QWEN38_REPO not in devhub.discussions
    settings.MESHDASH_HUB_WRITE_TOKEN = BOT  # control: with the bot's token it goes, authored by the bot
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    opened = FixProposal.objects.get(status=FixProposal.Status.OPEN)
    assert fix_following.refresh_fix(opened).author == "meshdash-bot"


def test_closed_without_merge_then_reopened_is_followed_and_said(writable: Any) -> None:
    devhub, _ = writable
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    proposal = FixProposal.objects.get()
    maintainer = HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN)
    maintainer.change_discussion_status(QWEN38_REPO, 1, "closed", comment="Not this week.")
    fix_following.follow_fix(proposal)
    assert (
        proposal.status == FixProposal.Status.CLOSED
        and "closed on the Hub without merging" in proposal.message
    )
    assert proposal.pk in fix_following.proposals_to_check()  # still followed: it may be reopened
    maintainer.change_discussion_status(QWEN38_REPO, 1, "open")
    fix_following.follow_fix(proposal)
    assert proposal.status == FixProposal.Status.OPEN and "reopened" in proposal.message
    maintainer.merge_pull_request(QWEN38_REPO, 1)
    fix_following.follow_fix(proposal)
    assert (
        proposal.status == FixProposal.Status.MERGED and proposal.verdict_comment_id == ""
    )  # not ingested yet
    ingested(devhub)
    fix_following.settle_revision(Revision.objects.get(commit_sha=proposal.merge_commit).pk)
    proposal.refresh_from_db()
    fix_following.follow_fix(proposal)
    assert proposal.verdict_comment_id and proposal.reported_at is not None
    comments = [e for e in devhub.discussions[QWEN38_REPO][0].events if e["type"] == "comment"]
    assert sum("meshdash checked this merge" in e["data"]["latest"]["raw"] for e in comments) == 1
    fix_following.follow_fix(proposal)  # a second check says nothing more
    comments = [e for e in devhub.discussions[QWEN38_REPO][0].events if e["type"] == "comment"]
    assert sum("meshdash checked this merge" in e["data"]["latest"]["raw"] for e in comments) == 1
    assert proposal.pk not in fix_following.proposals_to_check()


def test_a_mismatch_is_said_on_the_pr_and_on_the_page(writable: Any, client: Client) -> None:
    devhub, _ = writable
    ingested(devhub)
    assert run("propose_fix", QWEN38_REPO)[0] == 0
    proposal = FixProposal.objects.get()
    HfApi(endpoint=devhub.url, token=DEVHUB_TOKEN).merge_pull_request(QWEN38_REPO, 1)
    fix_following.refresh_fix(proposal)
    ingested(devhub)
    Revision.objects.filter(commit_sha=proposal.merge_commit).update(headline=Status.MTP_UNUSED)
    fix_following.settle_revision(Revision.objects.get(commit_sha=proposal.merge_commit).pk)
    proposal.refresh_from_db()
    fix_following.report_verdict(proposal)
    text = devhub.discussions[QWEN38_REPO][0].events[-1]["data"]["latest"]["raw"]
    assert (
        "did not land as promised" in text and "**MTP weights unused**, not the **serves with MTP**" in text
    )
    owner, name = QWEN38_REPO.split("/")
    page = client.get(f"/packages/{owner}/{name}/").content.decode()
    assert "landed as" in page and "not the promised serves with MTP" in page and "error-box" in page


def test_an_opening_proposal_whose_task_hit_a_bug_or_died_ends_failed(
    writable: Any, eager_tasks: None, monkeypatch: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from packages_app import tasks

    devhub, _ = writable
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    proposal, _ = fix_proposals.request_fix(package, base)

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(fix_proposals, "open_fix", bug)
    with pytest.raises(RuntimeError):
        tasks.open_fix_task.delay(proposal.pk).get()
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.FAILED and "RuntimeError" in proposal.message
    # a worker killed mid-call leaves it opening: past the lease, the periodic check ends it failed
    stuck, _ = fix_proposals.request_fix(package, base)
    FixProposal.objects.filter(pk=stuck.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    fresh = FixProposal.objects.create(
        package=package, revision=base, base_sha="f" * 40, title="t", description="d", diff="", manifest=""
    )
    fix_following.proposals_to_check()
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert stuck.status == FixProposal.Status.FAILED and "never finished" in stuck.message
    assert fresh.status == FixProposal.Status.OPENING  # control: inside the lease it is left alone
