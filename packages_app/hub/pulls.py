"""Writing to the Hub: one pull request with one changed file, and reading a pull request's status back.

The only write meshdash makes. It goes through ``HfApi.create_commit(..., create_pr=True,
parent_commit=<base sha>)`` (the PR is made from the audited revision, never a commit to a branch) and
``get_discussion_details``. The token is the write token the caller passes (never ``HF_TOKEN``), and
every request runs inside ``net.bounded_call`` under the endpoint's ``Policy``: only the configured
endpoint's origin is contacted (a redirect or link elsewhere is refused before it is sent), only https
unless the endpoint is a development server, and the Authorization header goes to that origin only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from huggingface_hub import CommitOperationAdd, HfApi

from packages_app.hub.client import HubConfig, config_from_settings, default_endpoint
from packages_app.hub.errors import EXPECTED_ERRORS, HubError, translate
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import Policy, bounded_call
from packages_app.hub.records import SHA_RE

T = TypeVar("T")
PR_STATUSES = ("draft", "open", "merged", "closed")
_PR_NUM = re.compile(r"/discussions/(\d{1,9})$")


@dataclass(frozen=True)
class PullRequest:
    num: int
    url: str
    status: str  # draft | open | merged | closed
    head_sha: str | None = None
    merge_commit: str | None = None
    target: str = "refs/heads/main"
    author: str = ""  # whose token opened it, as the Hub names them


class HubWriter:
    """One repo on the configured endpoint, with a write token; each method is one bounded call."""

    def __init__(
        self,
        repo_id: str,
        token: str,
        *,
        endpoint: str | None = None,
        config: HubConfig | None = None,
    ) -> None:
        if not token:
            raise HubError("no Hub write token is configured (MESHDASH_HUB_WRITE_TOKEN)")
        self.repo_id = validate_repo_id(repo_id)
        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self.config = config or config_from_settings()
        self.policy = Policy.for_endpoint(
            self.endpoint, (), development=self.config.development, limits=self.config.limits
        )
        self.policy.check_url(self.endpoint)  # plain http outside development: refused before anything
        self.api = HfApi(endpoint=self.endpoint, token=token)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        with bounded_call(self.policy, what):
            try:
                return fn()
            except EXPECTED_ERRORS as exc:
                raise translate(exc, what, max_retry_after=self.config.limits.max_retry_after) from exc

    def head(self, branch: str = "main") -> str:
        """The sha ``branch`` points at now."""
        info = self._call(
            f"{self.repo_id}@{branch}", lambda: self.api.repo_info(self.repo_id, revision=branch)
        )
        sha = getattr(info, "sha", None)
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            raise HubError(f"{self.repo_id}@{branch}: the Hub did not return a commit sha")
        return sha

    def open_pull_request(
        self, base_sha: str, path: str, content: bytes, title: str, description: str
    ) -> PullRequest:
        """A PR against main made from ``base_sha``, changing ``path`` only."""
        if not SHA_RE.match(base_sha):
            raise HubError(f"{base_sha[:60]!r} is not a 40-hex commit sha")
        what = f"{self.repo_id}: pull request from {base_sha[:12]}"

        def commit() -> PullRequest:
            info = self.api.create_commit(
                self.repo_id,
                [CommitOperationAdd(path, content)],
                commit_message=title,
                commit_description=description,
                create_pr=True,
                parent_commit=base_sha,
            )
            match = _PR_NUM.search(info.pr_url or "")
            if match is None:
                raise HubError(f"{what}: the Hub did not answer with a pull request URL")
            return PullRequest(int(match.group(1)), str(info.pr_url), "open", head_sha=info.oid)

        return self._call(what, commit)

    def pull_request(self, num: int) -> PullRequest:
        what = f"{self.repo_id}: pull request #{num}"
        details = self._call(what, lambda: self.api.get_discussion_details(self.repo_id, num))
        status = details.status if details.status in PR_STATUSES else "open"
        head = next((getattr(e, "oid", None) for e in reversed(details.events) if e.type == "commit"), None)
        return PullRequest(
            num=details.num,
            url=details.url,
            status=status,
            head_sha=head if isinstance(head, str) else None,
            merge_commit=details.merge_commit_oid,
            target=details.target_branch or "refs/heads/main",
            author=str(details.author or ""),
        )
