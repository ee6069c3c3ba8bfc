"""devhub answers the pull-request routes as the Hub's own API description says (issue 42 item 6).

Each route's answer is validated against the Hub's OpenAPI description as the ``pyhfapi`` package carries it
(its typed response models, generated from that description: required fields, literals, the author unions),
and every webhook payload devhub sends against huggingface_hub's ``WebhookPayload``. The requests are the ones
huggingface_hub 2.4.0 sends (its paths and bodies, ``hf_api.py``), made raw so the answer is seen as sent.
A control per model shows the validation can fail: devhub's answers before this issue (sparse authors, a
comment without ``html`` or ``updatedAt``, a webhook payload without ``repo.id`` or ``webhook``) are refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, WebhookPayload
from huggingface_hub.utils import get_session
from pydantic import TypeAdapter, ValidationError
from pyhfapi.types.api.dataset_commit_response import DatasetCommitResponse
from pyhfapi.types.api.discussion_add_comment_response import DiscussionAddCommentResponse, NewMessage
from pyhfapi.types.api.discussion_change_status_response import DiscussionChangeStatusResponse
from pyhfapi.types.api.discussion_change_title_response import DiscussionChangeTitleResponse
from pyhfapi.types.api.discussion_create_response import DiscussionCreateResponse
from pyhfapi.types.api.discussion_list_response import DiscussionListResponse
from pyhfapi.types.api.discussion_retrieve_response import DiscussionRetrieveResponse
from pyhfapi.types.api.model_check_preupload_response import ModelCheckPreuploadResponse
from pyhfapi.types.api.model_commit_response import ModelCommitResponse
from pyhfapi.types.api.model_list_refs_response import ModelListRefsResponse

from packages_app.devhub import CATALOG_REPO, MANIFEST_PATH, QWEN38_REPO, DevHub

BOT = "hf_devhub_conformance_bot_token"
MAINTAINER = "hf_devhub_conformance_maintainer"
REPO_API = f"/api/models/{QWEN38_REPO}"


class Session:
    """Raw calls to one devhub as one user, with every webhook payload it announced."""

    def __init__(self, hub: DevHub, events: list[dict[str, Any]], token: str = BOT) -> None:
        self.hub, self.events, self.token = hub, events, token

    def call(
        self, method: str, path: str, *, body: Any = None, raw: bytes | None = None, **params: str
    ) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        if raw is not None:
            headers["Content-Type"] = "application/x-ndjson"
        response = get_session().request(
            method,
            f"{self.hub.url}{path}",
            headers=headers,
            params=params or None,
            json=body,
            content=raw,
        )
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        return response.json()

    def as_user(self, token: str) -> Session:
        return Session(self.hub, self.events, token)


@pytest.fixture
def hub(demo_catalog: Path) -> Iterator[Session]:
    events: list[dict[str, Any]] = []
    server = DevHub(
        demo_catalog, users={BOT: "meshdash-bot", MAINTAINER: "maintainer"}, on_event=events.append
    ).start()
    yield Session(server, events)
    server.stop()


def valid(model: Any, data: Any) -> Any:
    return TypeAdapter(model).validate_python(data)


def ndjson(summary: str, content: bytes, path: str = MANIFEST_PATH, parent: str | None = None) -> bytes:
    header: dict[str, Any] = {"summary": summary, "description": "why"}
    if parent is not None:
        header["parentCommit"] = parent
    lines = [
        {"key": "header", "value": header},
        {
            "key": "file",
            "value": {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"},
        },
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def head(s: Session, repo: str = QWEN38_REPO) -> str:
    return str(HfApi(endpoint=s.hub.url).repo_info(repo).sha)


def open_pr(s: Session, content: bytes = b'{"fix": 1}\n') -> dict[str, Any]:
    base = head(s)
    answer = s.call(
        "POST", f"{REPO_API}/commit/main", raw=ndjson("Declare MTP", content, parent=base), create_pr="1"
    )
    return dict(answer)


def test_preupload_answers_the_documented_shape_on_main_and_on_a_pr_ref(hub: Session) -> None:
    body = {
        "files": [
            {"path": MANIFEST_PATH, "sample": "", "size": 10},
            {"path": "NEW.md", "sample": "", "size": 1},
        ]
    }
    answer = valid(ModelCheckPreuploadResponse, hub.call("POST", f"{REPO_API}/preupload/main", body=body))
    assert [(f.path, f.upload_mode, f.should_ignore) for f in answer.files] == [
        (MANIFEST_PATH, "regular", False),
        ("NEW.md", "regular", False),
    ]
    assert answer.files[0].oid is not None and answer.files[1].oid is None and answer.commit_oid == head(hub)
    open_pr(hub)
    on_pr = hub.call("POST", f"{REPO_API}/preupload/refs%2Fpr%2F1", body=body, create_pr="1")
    assert (
        valid(ModelCheckPreuploadResponse, on_pr).commit_oid == hub.hub.discussions[QWEN38_REPO][0].head_sha
    )


def test_a_commit_answers_the_documented_shape_on_a_branch_a_new_pr_and_a_pr_ref(hub: Session) -> None:
    base = head(hub)
    to_main = valid(
        ModelCommitResponse, hub.call("POST", f"{REPO_API}/commit/main", raw=ndjson("notes", b"x", "N.md"))
    )
    assert to_main.success and to_main.pull_request_url is None
    assert to_main.commit_url == f"{hub.hub.url}/{QWEN38_REPO}/commit/{to_main.commit_oid}"
    pr = valid(ModelCommitResponse, open_pr(hub))
    assert pr.pull_request_url == f"{hub.hub.url}/{QWEN38_REPO}/discussions/1"
    [opened] = hub.hub.discussions[QWEN38_REPO]
    assert opened.base_sha != base and opened.status == "open"  # made from main's head, passed as parent
    update = hub.call("POST", f"{REPO_API}/commit/refs%2Fpr%2F1", raw=ndjson("Update", b'{"fix": 2}\n'))
    pushed = valid(ModelCommitResponse, update)
    assert opened.head_sha == pushed.commit_oid and head(hub) == to_main.commit_oid  # main did not move
    assert [e["type"] for e in opened.events] == ["comment", "commit", "commit"]


def test_a_short_parent_commit_is_resolved_and_a_wrong_one_refused(hub: Session) -> None:
    base = head(hub)
    answer = hub.call(
        "POST", f"{REPO_API}/commit/main", raw=ndjson("PR", b"{}\n", parent=base[:7]), create_pr="1"
    )
    assert valid(ModelCommitResponse, answer).pull_request_url
    assert hub.hub.discussions[QWEN38_REPO][0].base_sha == base
    refused = get_session().post(
        f"{hub.hub.url}{REPO_API}/commit/main",
        params={"create_pr": "1"},
        headers={"Authorization": f"Bearer {BOT}"},
        content=ndjson("PR", b"{}\n", parent="fffff"),
    )
    assert refused.status_code == 404 and refused.headers["X-Error-Code"] == "RevisionNotFound"
    # and through huggingface_hub itself, which accepts any 5-40 hex parent
    info = HfApi(endpoint=hub.hub.url, token=BOT).create_commit(
        QWEN38_REPO,
        [CommitOperationAdd(MANIFEST_PATH, b'{"short": 1}\n')],
        commit_message="short parent",
        create_pr=True,
        parent_commit=base[:12],
    )
    assert info.pr_num == 2


def test_a_dataset_pr_carries_datasets_in_its_urls(hub: Session) -> None:
    api = f"/api/datasets/{CATALOG_REPO}"
    answer = hub.call(
        "POST", f"{api}/commit/main", raw=ndjson("entry", b"{}\n", "entries/x.json"), create_pr="1"
    )
    commit = valid(DatasetCommitResponse, answer)
    assert commit.pull_request_url == f"{hub.hub.url}/datasets/{CATALOG_REPO}/discussions/1"
    assert commit.commit_url.startswith(f"{hub.hub.url}/datasets/{CATALOG_REPO}/commit/")
    info = HfApi(endpoint=hub.hub.url, token=BOT).create_commit(
        CATALOG_REPO,
        [CommitOperationAdd("entries/y.json", b"{}\n")],
        commit_message="another",
        create_pr=True,
        repo_type="dataset",
    )
    assert info.pr_num == 2 and info.repo_url.repo_type == "dataset"  # the client reads the type off the URL
    [payload] = [e for e in hub.events if e["event"]["scope"] == "discussion" and e["discussion"]["num"] == 2]
    assert payload["discussion"]["url"]["web"] == f"{hub.hub.url}/datasets/{CATALOG_REPO}/discussions/2"


def test_creating_a_discussion_and_a_draft_pr_answers_the_documented_shape(hub: Session) -> None:
    body = {"title": "Is block 64 MTP?", "description": "asking", "pullRequest": False}
    made = valid(DiscussionCreateResponse, hub.call("POST", f"{REPO_API}/discussions", body=body))
    assert (made.num, made.pull_request, made.references) == (1, False, None)
    pr = valid(
        DiscussionCreateResponse,
        hub.call("POST", f"{REPO_API}/discussions", body=body | {"pullRequest": True}),
    )
    assert pr.num == 2 and pr.pull_request and pr.references is not None
    assert pr.references.base == "refs/heads/main" and pr.url == f"{hub.hub.url}/{QWEN38_REPO}/discussions/2"
    client = HfApi(endpoint=hub.hub.url, token=BOT)
    draft = client.create_pull_request(QWEN38_REPO, "Another", description="x")
    assert (draft.num, draft.status, draft.is_pull_request, draft.author) == (
        3,
        "draft",
        True,
        "meshdash-bot",
    )
    assert client.repo_info(QWEN38_REPO, revision="refs/pr/3").sha == head(hub)  # no change yet
    discussion = client.create_discussion(QWEN38_REPO, "Question", description="?")
    assert (discussion.status, discussion.is_pull_request, discussion.target_branch) == ("open", False, None)


def test_the_discussion_list_answers_the_documented_shape_and_the_hubs_filters(hub: Session) -> None:
    open_pr(hub)
    hub.call("POST", f"{REPO_API}/discussions", body={"title": "Question", "description": "?"})
    hub.call("POST", f"{REPO_API}/discussions/1/merge", body={})
    listed = valid(DiscussionListResponse, hub.call("GET", f"{REPO_API}/discussions"))
    assert [(d.num, d.status, d.is_pull_request) for d in listed.discussions] == [
        (2, "open", False),
        (1, "merged", True),
    ]
    assert listed.num_closed_discussions == 1 and listed.discussions[1].author is not None
    closed = valid(DiscussionListResponse, hub.call("GET", f"{REPO_API}/discussions", status="closed"))
    assert [d.num for d in closed.discussions] == [1]  # closed includes merged
    prs = valid(DiscussionListResponse, hub.call("GET", f"{REPO_API}/discussions", type="pull_request"))
    assert [d.num for d in prs.discussions] == [1]
    client = HfApi(endpoint=hub.hub.url)
    assert [d.num for d in client.get_repo_discussions(QWEN38_REPO, discussion_status="open")] == [2]


def test_details_answer_the_documented_shape_for_a_pr_and_a_discussion(hub: Session) -> None:
    open_pr(hub)
    hub.call("POST", f"{REPO_API}/discussions", body={"title": "Question", "description": "Is it?"})
    pr = valid(DiscussionRetrieveResponse, hub.call("GET", f"{REPO_API}/discussions/1", diff="1"))
    assert (
        pr.is_pull_request is True and pr.files_with_conflicts == [] and pr.changes.base == "refs/heads/main"
    )
    assert [e.type for e in pr.events] == ["comment", "commit"] and pr.author.name == "meshdash-bot"
    comment = pr.events[0]
    assert comment.data.latest.html == "<p>why</p>" and comment.data.latest.author.type == "user"
    assert "diff" in hub.call("GET", f"{REPO_API}/discussions/1", diff="1")
    assert "diff" not in hub.call("GET", f"{REPO_API}/discussions/1")
    question = valid(DiscussionRetrieveResponse, hub.call("GET", f"{REPO_API}/discussions/2"))
    assert question.is_pull_request is False and question.is_report is False
    # a conflicting change on main shows in filesWithConflicts, as the client reads it
    hub.call("POST", f"{REPO_API}/commit/main", raw=ndjson("other", b'{"other": 1}\n'))
    details = HfApi(endpoint=hub.hub.url).get_discussion_details(QWEN38_REPO, 1)
    assert details.conflicting_files == [MANIFEST_PATH]


def test_comment_title_and_status_with_a_comment_answer_the_documented_shapes(hub: Session) -> None:
    open_pr(hub)
    path = f"{REPO_API}/discussions/1"
    message = valid(
        DiscussionAddCommentResponse, hub.call("POST", f"{path}/comment", body={"comment": "a <b>\n\nb"})
    )
    assert message.new_message.data.latest.html == "<p>a &lt;b&gt;</p><p>b</p>"
    title = valid(
        DiscussionChangeTitleResponse, hub.call("POST", f"{path}/title", body={"title": "New title"})
    )
    assert (title.new_title.data.from_, title.new_title.data.to) == ("Declare MTP", "New title")
    closing = hub.call("POST", f"{path}/status", body={"status": "closed", "comment": "Not now."})
    assert valid(DiscussionChangeStatusResponse, closing).new_status.data.status == "closed"
    reopened = hub.call("POST", f"{path}/status", body={"status": "open"})
    assert valid(DiscussionChangeStatusResponse, reopened).new_status.data.status == "open"
    details = HfApi(endpoint=hub.hub.url).get_discussion_details(QWEN38_REPO, 1)
    kinds = [(e.type, getattr(e, "content", getattr(e, "new_status", ""))) for e in details.events]
    assert kinds[2:] == [
        ("comment", "a <b>\n\nb"),
        ("title-change", ""),
        ("comment", "Not now."),
        ("status-change", "closed"),
        ("status-change", "open"),
    ]
    assert details.title == "New title" and details.status == "open"


def test_a_merge_with_a_comment_makes_one_commit_on_main_and_says_merged(hub: Session) -> None:
    open_pr(hub)
    base = head(hub)
    assert hub.call("POST", f"{REPO_API}/discussions/1/merge", body={"comment": "Thanks!"}) == {}
    details = valid(DiscussionRetrieveResponse, hub.call("GET", f"{REPO_API}/discussions/1"))
    assert details.status == "merged" and details.changes.merge_commit_id == head(hub) != base
    assert [e.type for e in details.events][-2:] == ["comment", "status-change"]
    record = hub.hub.repos[("model", QWEN38_REPO)]
    merged = record.commit(head(hub))
    assert merged is not None and merged.parents == (base,)  # devhub's assumption: one parent, main's head


def test_editing_and_hiding_a_comment_answer_the_updated_comment(hub: Session) -> None:
    """pyhfapi has no model for these two routes; huggingface_hub reads ``updatedComment`` as a comment event,
    so it is held to the Hub's comment event (the ``newMessage`` of the comment route)."""
    open_pr(hub)
    path = f"{REPO_API}/discussions/1"
    posted = hub.call("POST", f"{path}/comment", body={"comment": "first"})["newMessage"]
    edited = hub.call("POST", f"{path}/comment/{posted['id']}/edit", body={"content": "second"})[
        "updatedComment"
    ]
    event = valid(NewMessage, edited)
    assert (event.data.latest.raw, event.data.edited, event.data.num_edits) == ("second", True, 1)
    assert edited["data"]["history"][0]["raw"] == "first"
    other = get_session().post(
        f"{hub.hub.url}{path}/comment/{posted['id']}/edit",
        json={"content": "not mine"},
        headers={"Authorization": f"Bearer {MAINTAINER}"},
    )
    assert other.status_code == 403  # only its author edits a comment
    hidden = valid(
        NewMessage,
        hub.as_user(MAINTAINER).call("POST", f"{path}/comment/{posted['id']}/hide")["updatedComment"],
    )
    assert hidden.data.hidden and hidden.data.hidden_by == "maintainer" and hidden.data.latest.raw == ""
    client = HfApi(endpoint=hub.hub.url, token=BOT)
    again = client.comment_discussion(QWEN38_REPO, 1, "third")
    assert client.edit_discussion_comment(QWEN38_REPO, 1, again.id, "fourth").content == "fourth"
    with pytest.warns(UserWarning, match="cannot be retrieved"):  # huggingface_hub's own warning
        assert client.hide_discussion_comment(QWEN38_REPO, 1, again.id).hidden


def test_refs_with_prs_answer_the_documented_shape(hub: Session) -> None:
    open_pr(hub)
    refs = valid(ModelListRefsResponse, hub.call("GET", f"{REPO_API}/refs", include_prs="1"))
    assert refs.pull_requests is not None
    assert [(p.name, p.ref) for p in refs.pull_requests] == [("pr/1", "refs/pr/1")]
    assert refs.pull_requests[0].target_commit == hub.hub.discussions[QWEN38_REPO][0].head_sha


def test_every_webhook_payload_parses_as_huggingface_hubs_webhook_payload(hub: Session) -> None:
    open_pr(hub)
    path = f"{REPO_API}/discussions/1"
    hub.call("POST", f"{REPO_API}/commit/refs%2Fpr%2F1", raw=ndjson("Update", b'{"fix": 2}\n'))
    posted = hub.call("POST", f"{path}/comment", body={"comment": "c"})["newMessage"]
    hub.call("POST", f"{path}/comment/{posted['id']}/edit", body={"content": "d"})
    hub.call("POST", f"{path}/comment/{posted['id']}/hide")
    hub.call("POST", f"{path}/title", body={"title": "t2"})
    hub.call("POST", f"{path}/status", body={"status": "closed", "comment": "later"})
    hub.call("POST", f"{path}/status", body={"status": "open"})
    hub.call("POST", f"{path}/merge", body={"comment": "merged"})
    hub.call("POST", f"{REPO_API}/discussions", body={"title": "Q", "description": "?"})
    parsed = [WebhookPayload.model_validate(p) for p in hub.events]
    seen = {(p.event.scope, p.event.action) for p in parsed}
    assert seen == {
        ("discussion", "create"),
        ("discussion", "update"),
        ("discussion.comment", "create"),
        ("discussion.comment", "update"),
        ("repo.content", "update"),
    }
    assert len(parsed) == 14 and all(p.webhook.version == 3 and p.repo.name == QWEN38_REPO for p in parsed)
    merged = [p for p in parsed if p.discussion and p.discussion.status == "merged"]
    assert merged and merged[0].discussion is not None and merged[0].discussion.changes is not None
    assert merged[0].discussion.changes.mergeCommitId == head(hub)
    comments = [p.comment for p in parsed if p.comment is not None]
    assert [c.content for c in comments] == ["c", "d", "", "later", "merged"]
    assert all(e["repo"]["headSha"] for e in hub.events)  # what meshdash's webhook endpoint reads


def test_control_the_shapes_devhub_answered_before_are_refused_by_the_same_models() -> None:
    old_event = {
        "id": "a" * 24,
        "type": "comment",
        "createdAt": "2026-12-01T00:00:00.000Z",
        "author": {"name": "meshdash-bot"},
        "data": {"edited": False, "hidden": False, "latest": {"raw": "hi"}},
    }
    with pytest.raises(ValidationError):
        valid(NewMessage, old_event)
    old_payload = {
        "event": {"action": "update", "scope": "discussion"},
        "repo": {"type": "model", "name": QWEN38_REPO, "headSha": "a" * 40},
        "discussion": {
            "num": 1,
            "title": "t",
            "status": "open",
            "isPullRequest": True,
            "author": {"id": "x"},
        },
    }
    with pytest.raises(ValidationError):
        WebhookPayload.model_validate(old_payload)
    with pytest.raises(ValidationError):  # a commit answer without hookOutput and success
        valid(ModelCommitResponse, {"commitOid": "a" * 40, "commitUrl": "u"})
    with pytest.raises(ValidationError):  # details of a PR without filesWithConflicts
        valid(DiscussionRetrieveResponse, {"_id": "x", "collection": "discussions", "isPullRequest": True})
