"""devhub's write side, driven by the real huggingface_hub: create_commit(create_pr=True), PRs, merge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError

from packages_app.devhub import MANIFEST_PATH, QWEN38_REPO, DevHub

BOT = "hf_devhub_bot_token_for_tests"


@pytest.fixture
def writable(demo_catalog: Path) -> Iterator[tuple[DevHub, list[dict[str, Any]]]]:
    """A devhub of its own (writes stay in its memory), with a bot user and the events it announces."""
    events: list[dict[str, Any]] = []
    hub = DevHub(demo_catalog, users={BOT: "meshdash-bot"}, on_event=events.append).start()
    yield hub, events
    hub.stop()


def _propose(api: HfApi, base: str, content: bytes) -> Any:
    return api.create_commit(
        QWEN38_REPO,
        [CommitOperationAdd(MANIFEST_PATH, content)],
        commit_message="Declare the MTP block",
        commit_description="meshdash found block 64.",
        create_pr=True,
        parent_commit=base,
    )


def test_a_pull_request_is_opened_listed_and_merged_into_a_new_main_revision(
    writable: Any, tmp_path: Path
) -> None:
    hub, events = writable
    api = HfApi(endpoint=hub.url, token=BOT)
    base = api.repo_info(QWEN38_REPO).sha
    info = _propose(api, base, b'{"patched": true}\n')

    assert info.pr_num == 1 and info.pr_url.endswith(f"{QWEN38_REPO}/discussions/1")
    assert api.repo_info(QWEN38_REPO).sha == base  # a PR is never a commit to main
    pr_head = api.repo_info(QWEN38_REPO, revision="refs/pr/1")
    assert pr_head.sha == info.oid
    base_files = {s.rfilename for s in api.repo_info(QWEN38_REPO, revision=base).siblings or []}
    assert {s.rfilename for s in pr_head.siblings or []} == base_files

    [listed] = list(api.get_repo_discussions(QWEN38_REPO, discussion_type="pull_request"))
    assert (listed.num, listed.status, listed.author, listed.is_pull_request) == (
        1,
        "open",
        "meshdash-bot",
        True,
    )
    details = api.get_discussion_details(QWEN38_REPO, 1)
    assert details.target_branch == "refs/heads/main"
    assert details.diff.startswith(f"--- a/{MANIFEST_PATH}\n+++ b/{MANIFEST_PATH}\n")
    assert '+{"patched": true}' in details.diff and details.diff.count("+++ ") == 1

    api.merge_pull_request(QWEN38_REPO, 1)
    merged = api.get_discussion_details(QWEN38_REPO, 1)
    head = api.repo_info(QWEN38_REPO).sha
    assert merged.status == "merged" and merged.merge_commit_oid == head != base
    assert api.list_repo_commits(QWEN38_REPO)[1].commit_id == base  # the merge sits on the old head
    data = Path(api.hf_hub_download(QWEN38_REPO, MANIFEST_PATH, revision=head, cache_dir=tmp_path))
    assert data.read_bytes() == b'{"patched": true}\n'
    scopes = [(e["event"]["scope"], e["event"]["action"]) for e in events]
    assert scopes == [
        ("discussion", "create"),
        ("repo.content", "update"),  # the PR's new ref, refs/pr/1
        ("discussion", "update"),
        ("repo.content", "update"),
    ]
    assert events[1]["updatedRefs"] == [{"ref": "refs/pr/1", "oldSha": None, "newSha": info.oid}]
    assert events[2]["discussion"]["status"] == "merged" and events[3]["repo"]["headSha"] == head
    assert events[3]["updatedRefs"] == [{"ref": "refs/heads/main", "oldSha": base, "newSha": head}]


def test_status_change_closes_and_reopens(writable: Any) -> None:
    hub, _ = writable
    api = HfApi(endpoint=hub.url, token=BOT)
    _propose(api, api.repo_info(QWEN38_REPO).sha, b"{}\n")
    api.change_discussion_status(QWEN38_REPO, 1, "closed")
    assert list(api.get_repo_discussions(QWEN38_REPO, discussion_status="open")) == []
    api.change_discussion_status(QWEN38_REPO, 1, "open")
    assert [d.num for d in api.get_repo_discussions(QWEN38_REPO, discussion_status="open")] == [1]


def test_writes_need_a_known_token_and_reads_do_not_see_other_servers_writes(
    writable: Any, devhub: DevHub
) -> None:
    hub, events = writable
    base = HfApi(endpoint=hub.url).repo_info(QWEN38_REPO).sha
    for token in (False, "hf_wrong"):
        with pytest.raises(HfHubHTTPError) as caught:
            _propose(HfApi(endpoint=hub.url, token=token), base, b"{}\n")
        assert caught.value.response.status_code == 401
    assert events == [] and hub.discussions == {}
    _propose(HfApi(endpoint=hub.url, token=BOT), base, b"{}\n")  # control: the known token writes
    assert [p.num for p in hub.discussions[QWEN38_REPO]] == [1]
    assert HfApi(endpoint=devhub.url).repo_info(QWEN38_REPO).sha == base  # the shared server is untouched


def test_a_merge_against_a_moved_main_keeps_the_other_change(writable: Any) -> None:
    hub, _ = writable
    api = HfApi(endpoint=hub.url, token=BOT)
    base = api.repo_info(QWEN38_REPO).sha
    _propose(api, base, b'{"fix": 1}\n')
    api.create_commit(QWEN38_REPO, [CommitOperationAdd("NOTES.md", b"hi\n")], commit_message="notes")
    api.merge_pull_request(QWEN38_REPO, 1)
    files = {s.rfilename for s in api.repo_info(QWEN38_REPO).siblings or []}
    assert "NOTES.md" in files and MANIFEST_PATH in files


def test_bad_commits_are_refused_with_the_hubs_codes(writable: Any) -> None:
    from huggingface_hub.utils import get_session

    hub, _ = writable
    url = f"{hub.url}/api/models/{QWEN38_REPO}/commit/main"
    auth = {"Authorization": f"Bearer {BOT}", "Content-Type": "application/x-ndjson"}
    header = b'{"key": "header", "value": {"summary": "x"}}\n'
    cases = {
        b"not json\n": 400,
        header: 400,  # no file
        header + b'{"key": "lfsFile", "value": {"path": "a.gguf", "oid": "0", "size": 1}}\n': 400,
        header + b'{"key": "file", "value": {"path": "../x", "content": "", "encoding": "base64"}}\n': 400,
        header + b'{"key": "file", "value": {"path": "x", "content": "%%%", "encoding": "base64"}}\n': 400,
        header + b'{"key": "deletedFile", "value": {"path": "nope"}}\n': 404,
    }
    for body, status in cases.items():
        assert get_session().post(url, content=body, headers=auth).status_code == status, body
    assert (
        hub.repos[("model", QWEN38_REPO)].branches["main"]
        == HfApi(endpoint=hub.url).repo_info(QWEN38_REPO).sha
    )
    ok = header + b'{"key": "file", "value": {"path": "x", "content": "eA==", "encoding": "base64"}}\n'
    assert get_session().post(url, content=ok, headers=auth).status_code == 200  # control


def test_a_merge_that_conflicts_is_refused(writable: Any) -> None:
    hub, _ = writable
    api = HfApi(endpoint=hub.url, token=BOT)
    base = api.repo_info(QWEN38_REPO).sha
    _propose(api, base, b'{"fix": 1}\n')
    api.create_commit(QWEN38_REPO, [CommitOperationAdd(MANIFEST_PATH, b'{"other": 1}\n')], commit_message="x")
    with pytest.raises(HfHubHTTPError) as caught:
        api.merge_pull_request(QWEN38_REPO, 1)
    assert caught.value.response.status_code == 409
    assert api.get_discussion_details(QWEN38_REPO, 1).status == "open"
