"""Repo-id validation before a request is made: the pure rule of ``packages_app.repo_ids``, then
huggingface_hub's own validator as the last word; a refusal is a ``HubError`` as well as the pure one.
"""

from __future__ import annotations

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id  # type: ignore[attr-defined]

from packages_app import repo_ids
from packages_app.hub.errors import InvalidRepoId


def validate_repo_id(repo_id: str) -> str:
    """Refuse anything but ``owner/name`` (never a URL, path or trick), with a message saying why."""
    try:
        repo_ids.validate_repo_id(repo_id)
    except repo_ids.InvalidRepoId as exc:
        raise InvalidRepoId(str(exc)) from None
    try:
        hf_validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InvalidRepoId(f"{repo_id!r} is not a valid repo id: {exc}") from None
    return repo_id
