"""The write path (packages_app/hub/pulls.py) inside the guards of every read: issue 48's two PR-write rows.

Each attack comes from a devhub of the test's own whose answers are rewritten for the attack, and each has a
control: the same attack with the guard off, which shows the test can fail.

- ``uploadMode: lfs``: a Hub asking for an LFS upload of the manifest makes huggingface_hub hand it to
  ``hf_xet``, which connects to the storage host the Hub names (here a loopback canary that never answers)
  outside the guarded client, and hangs. Guarded, nothing is uploaded, the canary hears nothing and the
  proposal ends ``failed`` at once.
- Hostile PR answers: ``commitUrl: "x"`` and details without ``filesWithConflicts`` make huggingface_hub raise
  ``ValueError`` / ``KeyError`` while reading them; a ``pullRequestUrl`` on another origin would be stored and
  linked as "on the Hub". Guarded: ``HubRefused``, the proposal ends failed (or keeps its state with the
  reason), nothing from another origin is stored or shown.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from packages_app import fix_proposals, hub, tasks
from packages_app.devhub import QWEN38_REPO, DevHub
from packages_app.devhub import server as devhub_server
from packages_app.hub import pulls
from packages_app.models import FixProposal
from tests.test_fixes import BOT, ingested, writable  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db
FIGURES = Path(__file__).resolve().parent.parent / "var" / "hostile-pr-figures.jsonl"


def record(scenario: str, **figures: Any) -> None:
    """What an attack cost, appended to var/hostile-pr-figures.jsonl (RELIABILITY.md quotes them)."""
    FIGURES.parent.mkdir(exist_ok=True)
    with FIGURES.open("a") as out:
        out.write(json.dumps({"scenario": scenario, **figures}) + "\n")


class Canary:
    """The storage host a hostile Hub names: it records every request and never answers."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str, str]] = []
        self.release = threading.Event()
        canary = self

        class Handler(BaseHTTPRequestHandler):
            def do_any(self) -> None:
                canary.seen.append((time.monotonic(), self.command, self.path))
                canary.release.wait(30)

            do_GET = do_POST = do_PUT = do_HEAD = do_any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lfs_hub(writable: Any, monkeypatch: Any) -> Iterator[tuple[DevHub, Canary]]:  # noqa: F811
    """devhub answering every preupload ``lfs``, and a Xet write token naming the canary as its storage."""
    devhub, _ = writable
    canary = Canary()
    preupload = devhub_server._WRITE_ACTIONS["preupload"]

    def lfs(*args: Any) -> Any:
        status, payload, headers = preupload(*args)
        return status, payload | {"files": [f | {"uploadMode": "lfs"} for f in payload["files"]]}, headers

    def xet_token(*args: Any) -> Any:
        expires = str(int(time.time()) + 3600)
        headers = {
            "X-Xet-Cas-Url": canary.url,
            "X-Xet-Access-Token": "xet",
            "X-Xet-Token-Expiration": expires,
        }
        return 200, {"casUrl": canary.url, "accessToken": "xet", "exp": int(expires)}, headers

    monkeypatch.setitem(devhub_server._WRITE_ACTIONS, "preupload", lfs)
    monkeypatch.setitem(devhub_server._API_ACTIONS, "xet-write-token", xet_token)
    yield devhub, canary
    canary.stop()


def test_a_hub_asking_for_an_lfs_upload_gets_nothing_and_the_proposal_ends_failed(
    lfs_hub: tuple[DevHub, Canary], eager_tasks: None
) -> None:
    devhub, canary = lfs_hub
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    proposal, _ = fix_proposals.request_fix(package, base)
    devhub.counters.reset()
    began = time.monotonic()
    assert tasks.open_fix_task.delay(proposal.pk).get() == "failed"
    took = time.monotonic() - began
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.FAILED and "LFS upload" in proposal.message
    assert canary.seen == [] and QWEN38_REPO not in devhub.discussions
    paths = set(devhub.counters.snapshot()["by_path"])
    assert not any("xet" in p or "lfs" in p for p in paths)  # not even the token was asked for
    assert took < 5
    record("lfs upload mode, guarded", seconds=round(took, 3), canary_requests=len(canary.seen))
    # and a new proposal may be requested: the failed one blocks nothing
    again, created = fix_proposals.request_fix(package, base)
    assert created and again.pk != proposal.pk


CONTROL = """
import sys
from huggingface_hub import CommitOperationAdd, HfApi
HfApi(endpoint=sys.argv[1], token=sys.argv[2]).create_commit(
    sys.argv[3], [CommitOperationAdd("model-package.json", b'{"x": 1}')], commit_message="t", create_pr=True
)
print("returned")
"""


def test_control_huggingface_hubs_own_upload_goes_to_the_host_the_hub_names_and_hangs(
    lfs_hub: tuple[DevHub, Canary], tmp_path: Path
) -> None:
    """The same attack on huggingface_hub's own HfApi (no guard), in a process of its own, to be killed."""
    devhub, canary = lfs_hub
    began = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", CONTROL, devhub.url, BOT, QWEN38_REPO],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"HF_HUB_DISABLE_PROGRESS_BARS": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path)},
    )
    try:
        deadline = began + 30
        while not canary.seen and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert canary.seen, "hf_xet never reached the host the Hub named"
        reached = canary.seen[0][0] - began
        time.sleep(5)
        assert child.poll() is None  # still hanging on the storage host, 5 s on
        record("lfs upload mode, control", canary_after_seconds=round(reached, 2), still_running_after=5)
    finally:
        child.kill()
        child.wait(10)
    assert QWEN38_REPO not in devhub.discussions


@pytest.fixture
def answers(writable: Any, monkeypatch: Any) -> Iterator[tuple[DevHub, dict[str, Any]]]:  # noqa: F811
    """devhub whose commit answers and PR details are rewritten by what the test puts in the dict."""
    devhub, _ = writable
    rewrite: dict[str, Any] = {}
    commit_answer, details = devhub_server._commit_answer, devhub_server._discussion_detail

    def hostile_commit(*args: Any) -> dict[str, Any]:
        return commit_answer(*args) | rewrite.get("commit", {})

    def hostile_details(*args: Any) -> dict[str, Any]:
        answer = details(*args)
        for key in rewrite.get("drop", ()):
            answer.pop(key, None)
        return answer

    monkeypatch.setattr(devhub_server, "_commit_answer", hostile_commit)
    monkeypatch.setattr(devhub_server, "_discussion_detail", hostile_details)
    yield devhub, rewrite


def opened_with(devhub: DevHub, eager: bool = True) -> tuple[FixProposal, str]:
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    proposal, _ = fix_proposals.request_fix(package, base)
    outcome = tasks.open_fix_task.delay(proposal.pk).get() if eager else ""
    proposal.refresh_from_db()
    return proposal, outcome


def test_a_commit_url_of_x_is_a_refusal_and_the_proposal_ends_failed(
    answers: tuple[DevHub, dict[str, Any]], eager_tasks: None
) -> None:
    devhub, rewrite = answers
    rewrite["commit"] = {"commitUrl": "x"}
    proposal, outcome = opened_with(devhub)
    assert outcome == "failed" and proposal.status == FixProposal.Status.FAILED
    assert (
        "answer could not be read" in proposal.message and "'x'" in proposal.message
    )  # HfUriError: a ValueError
    assert proposal.pr_url == "" and proposal.pr_number is None
    record("commitUrl x, guarded", status=proposal.status)


def test_control_without_reading_answers_carefully_commit_url_x_escapes_and_leaves_the_proposal_opening(
    answers: tuple[DevHub, dict[str, Any]], monkeypatch: Any
) -> None:
    devhub, rewrite = answers
    rewrite["commit"] = {"commitUrl": "x"}
    monkeypatch.setattr(pulls, "ANSWER_ERRORS", ())
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    proposal, _ = fix_proposals.request_fix(package, base)
    with pytest.raises(ValueError):
        try:
            fix_proposals.open_fix(proposal)  # what the task ran before, catching Hub errors only
        except hub.HubError:
            pytest.fail("became a Hub error")
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.OPENING  # stuck: no new proposal for this revision
    assert fix_proposals.request_fix(package, base) == (proposal, False)
    record("commitUrl x, control", status=proposal.status)


def test_details_without_files_with_conflicts_are_a_refusal_and_the_proposal_keeps_its_state(
    answers: tuple[DevHub, dict[str, Any]], eager_tasks: None
) -> None:
    devhub, rewrite = answers
    proposal, _ = opened_with(devhub)
    assert proposal.status == FixProposal.Status.OPEN
    rewrite["drop"] = ["filesWithConflicts"]
    assert tasks.check_fix.delay(proposal.pk).get() == "failed"
    proposal.refresh_from_db()
    assert proposal.status == FixProposal.Status.OPEN and "could not be read (KeyError" in proposal.message
    # control: the same check on huggingface_hub's own reading raises the KeyError itself
    with pytest.raises(KeyError):
        pulls.HfApi(endpoint=devhub.url).get_discussion_details(QWEN38_REPO, 1)
    rewrite["drop"] = []  # and once the Hub answers properly, the next check reads it
    assert tasks.check_fix.delay(proposal.pk).get() == "open"
    record("details without filesWithConflicts", status=proposal.status)


def test_a_pull_request_url_on_another_origin_is_refused_and_never_shown(
    answers: tuple[DevHub, dict[str, Any]], eager_tasks: None
) -> None:
    devhub, rewrite = answers
    rewrite["commit"] = {"pullRequestUrl": f"https://evil.example/{QWEN38_REPO}/discussions/1"}
    proposal, outcome = opened_with(devhub)
    assert outcome == "failed" and proposal.status == FixProposal.Status.FAILED
    assert "evil.example" not in proposal.pr_url and "is not a discussion of" in proposal.message
    owner, name = QWEN38_REPO.split("/")
    page = Client().get(f"/packages/{owner}/{name}/").content.decode()
    assert 'href="https://evil.example' not in page
    record("pullRequestUrl on another origin, guarded", stored=proposal.pr_url)


def test_control_without_the_origin_check_the_other_origin_is_stored_and_linked_as_on_the_hub(
    answers: tuple[DevHub, dict[str, Any]], eager_tasks: None, monkeypatch: Any, settings: Any
) -> None:
    devhub, rewrite = answers
    evil = f"https://evil.example/{QWEN38_REPO}/discussions/1"
    rewrite["commit"] = {"pullRequestUrl": evil}
    monkeypatch.setattr(pulls.HubWriter, "pull_request_url", lambda self, url, what: (1, url))
    proposal, outcome = opened_with(devhub)
    assert outcome == "open" and proposal.pr_url == evil
    owner, name = QWEN38_REPO.split("/")
    # the page's own check (a row stored before this guard) still keeps the link off
    page = Client().get(f"/packages/{owner}/{name}/").content.decode()
    assert f'href="{evil}"' not in page
    # and without it too, the anonymous reader is sent to the other origin "on the Hub"
    from packages_app.web import package_pages

    monkeypatch.setattr(package_pages, "hub_pr_link", lambda url: url)
    page = Client().get(f"/packages/{owner}/{name}/").content.decode()
    assert f'<a href="{evil}" rel="noopener noreferrer">on the Hub' in page
    record("pullRequestUrl on another origin, control", stored=proposal.pr_url)


def test_a_hub_that_never_answers_the_commit_fails_it_at_the_call_deadline(
    writable: Any,  # noqa: F811 - the fixture imported above
    eager_tasks: None,
    monkeypatch: Any,
    settings: Any,
) -> None:
    devhub, _ = writable
    settings.MESHDASH_HUB_CALL_DEADLINE = 0.5
    stalled = threading.Event()
    commit = devhub_server._WRITE_ACTIONS["commit"]

    def never(*args: Any) -> Any:
        stalled.wait(3)
        return commit(*args)

    monkeypatch.setitem(devhub_server._WRITE_ACTIONS, "commit", never)
    monkeypatch.setattr(tasks.open_fix_task, "max_retries", 0)  # the last try (eager mode raises a retry)
    package = ingested(devhub)
    base = package.latest_revision
    assert base is not None
    proposal, _ = fix_proposals.request_fix(package, base)
    began = time.monotonic()
    try:
        outcome = tasks.open_fix_task.delay(proposal.pk).get()
    finally:
        stalled.set()
    took = time.monotonic() - began
    proposal.refresh_from_db()
    assert outcome == "failed" and proposal.status == FixProposal.Status.FAILED
    assert "did not answer" in proposal.message and took < 3
    record("commit never answered, 0.5 s deadline, last try", seconds=round(took, 2), status=proposal.status)
