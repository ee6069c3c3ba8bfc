"""Hub identifiers, checked before anything is fetched: repo ids (`owner/name`) and pinned commit shas.

Pure (no Django, no huggingface_hub), so forms, the webhook and the commands can refuse a bad id without
loading the Hub client. The hub package applies huggingface_hub's own validator on top, as the last word.
"""

from __future__ import annotations

import re

COMMIT_SHA_RE = re.compile(r"[0-9a-f]{40}")
MAX_REPO_ID_LENGTH = 96
_PART_RE = re.compile(r"[A-Za-z0-9._-]{1,96}")


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


def within_tracking_rules(repo_id: str, namespaces: list[str]) -> bool:
    """A repo meshdash may start following on the word of a node or a webhook (once the Hub confirms it):
    a ``-layers`` repo of a followed namespace, as discovery tracks them."""
    owner, _, name = repo_id.partition("/")
    return owner in namespaces and name.endswith("-layers")


def is_commit_sha(value: object) -> bool:
    """A full, lowercase, 40-hex commit sha: what a pinned revision is."""
    return isinstance(value, str) and COMMIT_SHA_RE.fullmatch(value) is not None
