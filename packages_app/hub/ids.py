"""Repo-id validation: refuse anything but ``owner/name`` before a request is made.

Kept here until the pure layout module takes it; huggingface_hub's own validator has the last word.
"""

from __future__ import annotations

import re

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id  # type: ignore[attr-defined]

from packages_app.hub.errors import InvalidRepoId

_PART_RE = re.compile(r"^[A-Za-z0-9._-]{1,96}$")


def validate_repo_id(repo_id: str) -> str:
    """Refuse anything but ``owner/name`` before a request is made: never a URL, path or trick.

    The messages say what is wrong, for the track form, the commands and the webhook alike.
    """
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
        if not _PART_RE.match(part):
            raise InvalidRepoId(
                f"{repo_id!r}: owner and name are 1-96 characters of letters, digits, '.', '_' and '-'"
            )
        if part[0] in ".-" or part[-1] in ".-":
            raise InvalidRepoId(f"{repo_id!r}: owner and name cannot start or end with '.' or '-'")
    if len(repo_id) > 96:
        raise InvalidRepoId(
            f"{repo_id!r} is {len(repo_id)} characters long; a repo id is at most 96 characters"
        )
    try:
        hf_validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InvalidRepoId(f"{repo_id!r} is not a valid repo id: {exc}") from None
    return repo_id
