"""devhub's discussions and pull requests as the Hub describes them: records, events, webhook payloads.

The shapes follow the Hub's OpenAPI description (the typed response models of the ``pyhfapi`` package are
one machine-readable copy; ``tests/test_devhub_conformance.py`` validates every answer against them) and
what ``huggingface_hub`` 2.4.0 reads (``hf_api.py``, ``community.py``, ``_webhooks_payload.py``), summarised
in ``docs/domain.md`` section 8. Where neither says what the Hub does, devhub assumes, and says so here:

- **Authors** are full user records (``_id``, ``avatarUrl``, ``fullname``, ``isHf``, ``isHfAdmin``,
  ``isMod``, ``isPro``, ``name``, ``type: "user"``); devhub knows no full names, so ``fullname`` is the
  user name, and the avatar a default one, a relative ``/avatars/<hash>.svg`` path.
- **Comment text**: ``latest.html`` is the raw text escaped, one ``<p>`` per paragraph (the Hub renders
  Markdown; devhub does not). ``history`` holds the earlier versions, newest first; an edit pushes the
  current one there. A hidden comment keeps its flag and ``hiddenBy``, and its text is gone from
  ``latest`` (huggingface_hub: a hidden comment's content cannot be retrieved any more; what the Hub
  shows instead is not documented).
- **Statuses**: a PR opened by ``POST .../discussions`` with ``pullRequest: true`` is ``draft``
  (huggingface_hub: "Pull Requests created programmatically will be in draft status") and stays draft
  when commits are pushed to ``refs/pr/N``, until ``status`` sets it ``open``; a PR opened by a commit
  with ``create_pr=1`` is ``open``. Only an open PR merges; a merged PR takes no status change and no
  commit. The list filter ``status=open`` lists open and draft ones, ``status=closed`` closed and merged
  ones (the Hub's filter knows only those two).
- **A status change or merge with a comment** adds the comment event first, then the status-change event.
- **Webhook payloads** are version 3 (the only version huggingface_hub's ``WebhookPayload`` accepts): a
  discussion's creation and each status change, title change and merge send scope ``discussion``; a
  comment, its edit and its hiding send ``discussion.comment``; every ref that moves (a branch, a tag,
  ``refs/pr/N``) sends ``repo.content`` with ``updatedRefs`` (the Hub's webhook guide: a new pull request
  triggers ``repo.content`` too, for its new ref).
"""

from __future__ import annotations

import hashlib
import html
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .store import RepoRecord

OPEN_STATUSES = ("open", "draft")
CLOSED_STATUSES = ("closed", "merged")
WEBHOOK_VERSION = 3


def object_id(*parts: object) -> str:
    """A 24-hex object id, as the Hub's ids look, derived from what it names (stable across restarts)."""
    key = ":".join(str(p) for p in parts)
    return hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:24]


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def user_record(name: str) -> dict[str, Any]:
    """The Hub's full record of a user, as events and discussions carry it."""
    return {
        "_id": object_id("user", name),
        "avatarUrl": f"/avatars/{hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()}.svg",
        "fullname": name,
        "isHf": False,
        "isHfAdmin": False,
        "isMod": False,
        "isPro": False,
        "name": name,
        "type": "user",
    }


def repo_web_url(base_url: str, record: RepoRecord) -> str:
    """``<base>/<repo>`` for a model, ``<base>/datasets/<repo>`` for a dataset (the Hub's web URLs)."""
    prefix = "" if record.repo_type == "model" else f"{record.repo_type}s/"
    return f"{base_url}/{prefix}{record.repo_id}"


def repo_api_url(base_url: str, record: RepoRecord) -> str:
    return f"{base_url}/api/{record.repo_type}s/{record.repo_id}"


def comment_html(raw: str) -> str:
    paragraphs = [p for p in raw.replace("\r\n", "\n").split("\n\n") if p.strip()]
    return "".join(f"<p>{html.escape(p).replace(chr(10), '<br>')}</p>" for p in paragraphs)


@dataclass
class Discussion:
    """A discussion or pull request on devhub. A PR's head is ``refs/pr/<num>``, made from ``base_sha``."""

    num: int
    title: str
    author: str
    created_at: datetime
    repo_type: str
    repo_id: str
    is_pull_request: bool = True
    target: str = "main"  # the branch a PR merges into
    base_sha: str = ""
    head_sha: str = ""
    status: str = "open"  # draft | open | closed | merged
    merge_commit: str | None = None
    pinned: bool = False
    locked: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return object_id("discussion", self.repo_type, self.repo_id, self.num)

    @property
    def description(self) -> str:
        """The first comment's text: what the PR says it does."""
        first = next((e for e in self.events if e["type"] == "comment"), None)
        return str(first["data"]["latest"]["raw"]) if first else ""

    @property
    def ref(self) -> str:
        return f"refs/pr/{self.num}"

    def web_url(self, base_url: str, record: RepoRecord) -> str:
        return f"{repo_web_url(base_url, record)}/discussions/{self.num}"

    def comments(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "comment"]

    def comment(self, comment_id: str) -> dict[str, Any] | None:
        return next((e for e in self.comments() if e["id"] == comment_id.lower()), None)

    def add_event(self, kind: str, data: dict[str, Any], author: str) -> dict[str, Any]:
        event = {
            "id": object_id("event", self.id, len(self.events), kind),
            "type": kind,
            "createdAt": iso(datetime.now(UTC)),
            "author": user_record(author),
            "data": data,
        }
        self.events.append(event)
        return event

    def add_comment(self, raw: str, author: str) -> dict[str, Any]:
        return self.add_event("comment", comment_data(raw, author), author)

    def summary(self, record: RepoRecord) -> dict[str, Any]:
        """One item of the discussion list."""
        return {
            "num": self.num,
            "title": self.title,
            "author": user_record(self.author),
            "createdAt": iso(self.created_at),
            "status": self.status,
            "repo": {"name": record.repo_id, "type": record.repo_type},
            "isPullRequest": self.is_pull_request,
            "pinned": self.pinned,
            "numComments": len(self.comments()),
            "numReactionUsers": 0,
            "topReactions": [],
            "repoOwner": {
                "name": record.author,
                "type": "org",
                "isParticipating": False,
                "isDiscussionAuthor": self.author == record.author,
            },
        }

    def details(self, record: RepoRecord, conflicts: list[str], diff: str | None) -> dict[str, Any]:
        """``GET .../discussions/{num}``: the summary's fields, the events; a PR's changes and conflicts."""
        summary = self.summary(record)
        del summary["numComments"], summary["numReactionUsers"], summary["topReactions"]
        detail = summary | {
            "_id": self.id,
            "collection": "discussions",
            "events": self.events,
            "locked": self.locked,
        }
        if not self.is_pull_request:
            return detail | {"isReport": False}
        changes: dict[str, Any] = {"base": f"refs/heads/{self.target}"}
        if self.merge_commit:
            changes["mergeCommitId"] = self.merge_commit
        detail |= {"changes": changes, "filesWithConflicts": conflicts}
        return detail | ({"diff": diff} if diff is not None else {})


def comment_data(raw: str, author: str) -> dict[str, Any]:
    latest = {"raw": raw, "html": comment_html(raw), "updatedAt": iso(datetime.now(UTC))}
    return {
        "edited": False,
        "hidden": False,
        "latest": latest | {"author": user_record(author)},
        "history": [],
        "numEdits": 0,
        "editors": [author],
        "editorAvatarUrls": [user_record(author)["avatarUrl"]],
        "reactions": [],
    }


def edit_comment(event: dict[str, Any], raw: str, editor: str) -> None:
    data = event["data"]
    data["history"].insert(0, data["latest"])
    data["latest"] = {
        "raw": raw,
        "html": comment_html(raw),
        "updatedAt": iso(datetime.now(UTC)),
        "author": user_record(editor),
    }
    data["edited"], data["numEdits"] = True, data["numEdits"] + 1
    if editor not in data["editors"]:
        data["editors"].append(editor)
        data["editorAvatarUrls"].append(user_record(editor)["avatarUrl"])


def hide_comment(event: dict[str, Any], by: str) -> None:
    data = event["data"]
    data["hidden"], data["hiddenBy"] = True, by
    data["latest"] = data["latest"] | {"raw": "", "html": "", "updatedAt": iso(datetime.now(UTC))}
    data["history"] = []


# --- webhook payloads (version 3) -----------------------------------------------------------------------


def webhook_repo(base_url: str, record: RepoRecord, head: str | None) -> dict[str, Any]:
    return {
        "type": record.repo_type,
        "name": record.repo_id,
        "id": object_id("repo", record.repo_type, record.repo_id),
        "private": record.private,
        "url": {"web": repo_web_url(base_url, record), "api": repo_api_url(base_url, record)},
        "owner": {"id": object_id("user", record.author)},
        "headSha": head,
        "tags": list(record.tags),
    }


def payload(scope: str, action: str, base_url: str, record: RepoRecord, **parts: Any) -> dict[str, Any]:
    """A webhook payload: the event, the repo (with main's head), the webhook, and the given parts."""
    return {
        "event": {"action": action, "scope": scope},
        "repo": webhook_repo(base_url, record, record.branches.get("main")),
        "webhook": {"id": object_id("webhook", "devhub"), "version": WEBHOOK_VERSION},
        **parts,
    }


def webhook_discussion(base_url: str, record: RepoRecord, d: Discussion) -> dict[str, Any]:
    web = d.web_url(base_url, record)
    item: dict[str, Any] = {
        "id": d.id,
        "num": d.num,
        "author": {"id": object_id("user", d.author)},
        "url": {"web": web, "api": f"{repo_api_url(base_url, record)}/discussions/{d.num}"},
        "title": d.title,
        "isPullRequest": d.is_pull_request,
        "status": d.status,
        "pinned": d.pinned,
    }
    if d.is_pull_request:
        item["changes"] = {"base": f"refs/heads/{d.target}", "mergeCommitId": d.merge_commit}
    return item


def webhook_comment(
    base_url: str, record: RepoRecord, d: Discussion, event: dict[str, Any]
) -> dict[str, Any]:
    data = event["data"]
    return {
        "id": event["id"],
        "author": {"id": event["author"]["_id"]},
        "hidden": data["hidden"],
        "content": data["latest"]["raw"],
        "url": {"web": f"{d.web_url(base_url, record)}#{event['id']}"},
    }


def updated_ref(ref: str, old: str | None, new: str | None) -> dict[str, Any]:
    return {"ref": ref, "oldSha": old, "newSha": new}
