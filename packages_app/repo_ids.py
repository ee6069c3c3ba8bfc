"""Hub identifiers, checked before anything is fetched: repo ids (`owner/name`) and pinned commit shas.

Pure (no Django, no huggingface_hub), so forms, the webhook and the commands can refuse a bad id without
loading the Hub client. The hub package applies huggingface_hub's own validator on top, as the last word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

COMMIT_SHA_RE = re.compile(r"[0-9a-f]{40}")
MAX_REPO_ID_LENGTH = 96
_PART_RE = re.compile(r"[A-Za-z0-9._-]{1,96}")
# A branch, tag or sha as a Hub URL names it after /tree/ (refs/pr/1 comes percent-encoded).
_REVISION_RE = re.compile(r"[A-Za-z0-9._/-]{1,200}")
# The public Hub: its URLs are what people copy, whichever Hub-compatible server HF_ENDPOINT names.
PUBLIC_HUB = "https://huggingface.co"


class InvalidRepoId(ValueError):
    """A repo id that names no Hub repo; the message says what is wrong with it."""


def validate_repo_id(repo_id: str) -> str:
    """Refuse anything but ``owner/name``: never a URL, a path or a trick. Return the id unchanged."""
    if not isinstance(repo_id, str) or not repo_id:
        raise InvalidRepoId("the repo id is empty")
    if "://" in repo_id or repo_id.startswith(("/", "~")) or "\\" in repo_id:
        raise InvalidRepoId(
            f"{repo_id!r} is not a URL or a path; a repo id is owner/name, e.g. meshllm/Model-layers"
        )
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise InvalidRepoId(f"{repo_id!r} is not owner/name, with exactly one slash")
    if "--" in repo_id or ".." in repo_id:
        raise InvalidRepoId(f"{repo_id!r}: a repo id cannot contain '--' or '..'")
    if repo_id.endswith(".git"):
        raise InvalidRepoId(f"{repo_id!r}: a repo id cannot end with '.git'")
    for part in parts:
        if not _PART_RE.fullmatch(part):
            raise InvalidRepoId(
                f"{repo_id!r}: owner and name are 1-96 characters of letters, digits, '.', '_' and '-'"
            )
        if part[0] in ".-" or part[-1] in ".-":
            raise InvalidRepoId(f"{repo_id!r}: owner and name cannot start or end with '.' or '-'")
    if len(repo_id) > MAX_REPO_ID_LENGTH:
        limit = MAX_REPO_ID_LENGTH
        raise InvalidRepoId(
            f"{repo_id!r} is {len(repo_id)} characters long; a repo id is at most {limit} characters"
        )
    return repo_id


@dataclass(frozen=True)
class RepoReference:
    repo_id: str
    revision: str | None = None  # from a URL's /tree/<rev>


def parse_repo_reference(value: str, endpoints: Iterable[str] = ()) -> RepoReference:
    """``owner/name``, or a Hub URL of it, ``<endpoint>/<owner>/<name>`` with an optional ``/tree/<rev>``
    (and anything after the revision), on one of ``endpoints`` or the public Hub. A URL of another
    host, of a dataset or a Space, or of a single file is refused with the reason; nothing is fetched."""
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or "://" not in text:
        return RepoReference(validate_repo_id(text))
    origin, path = _hub_path(text, [PUBLIC_HUB, *endpoints])
    parts = [unquote(p) for p in path.split("/") if p]
    if parts[:1] in (["datasets"], ["spaces"]):
        raise InvalidRepoId(f"{text!r} is a {parts[0][:-1]}, not a model repo")
    if len(parts) < 2:
        raise InvalidRepoId(f"{text!r} names no repo: a Hub URL is {origin}/owner/name")
    repo_id = validate_repo_id("/".join(parts[:2]))
    rest = parts[2:]
    if not rest:
        return RepoReference(repo_id)
    if rest[0] != "tree" or len(rest) < 2:
        raise InvalidRepoId(f"{text!r}: after owner/name a Hub URL has only /tree/<revision>")
    if not _REVISION_RE.fullmatch(rest[1]) or ".." in rest[1]:
        raise InvalidRepoId(f"{text!r}: {rest[1]!r} is not a branch, tag or commit")
    return RepoReference(repo_id, rest[1])


def _hub_path(url: str, endpoints: list[str]) -> tuple[str, str]:
    """(origin, path below it) when ``url`` is on one of the endpoints; else InvalidRepoId."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidRepoId(f"{url!r} is not a URL") from None
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidRepoId(f"{url!r}: a Hub URL has no query, fragment or credentials")
    for endpoint in endpoints:
        base = urlsplit(endpoint.rstrip("/"))
        same = (parts.scheme, parts.netloc.lower()) == (base.scheme, base.netloc.lower())
        if same and (parts.path + "/").startswith(base.path + "/"):
            return f"{base.scheme}://{base.netloc}{base.path}", parts.path[len(base.path) :]
    hubs = ", ".join(dict.fromkeys(e.rstrip("/") for e in endpoints))
    raise InvalidRepoId(f"{url!r} is not a URL of the Hub ({hubs}); a repo id is owner/name")


def within_tracking_rules(repo_id: str, namespaces: list[str]) -> bool:
    """A repo meshdash may start following on the word of a node or a webhook, once the Hub confirms it
    holds model-package.json: a repo of a followed namespace, whatever it is called (mesh-llm finds a
    package by its manifest, docs/rules.md section 6b)."""
    owner, _, name = repo_id.partition("/")
    return owner in namespaces and bool(name)


def is_commit_sha(value: object) -> bool:
    """A full, lowercase, 40-hex commit sha: what a pinned revision is."""
    return isinstance(value, str) and COMMIT_SHA_RE.fullmatch(value) is not None
