"""Writing to the Hub: a pull request with one changed file, its updates and comments, its status read back.

The only writes meshdash makes. A PR goes through ``HfApi.create_commit(..., create_pr=True,
parent_commit=<base sha>)`` (made from the audited revision, never a commit to a branch); an update is a
commit to ``refs/pr/N``; a comment is ``comment_discussion``; the status is ``get_discussion_details``.
The token is the write token the caller passes (never ``HF_TOKEN``), and every call runs inside
``net.bounded_call`` under the endpoint's ``Policy``, like every read: only the configured endpoint's origin
is contacted (a redirect or link elsewhere is refused before it is sent), only https unless the endpoint is a
development server, the Authorization header to that origin only, and the call's deadline over all of it.

Two things huggingface_hub would do outside those guards, refused here:

- **An LFS or Xet upload.** When the Hub's preupload answer says ``uploadMode: lfs``, huggingface_hub hands
  the bytes to ``hf_xet`` (a native client with its own sockets, timeouts and hosts the Hub names) or to an
  LFS storage URL. A manifest is a few kilobytes: it goes as a regular file inside the commit, or not at all.
  ``RegularOnlyApi.preupload_lfs_files`` asks for the upload modes with the library's own request
  (``_commit_api._fetch_upload_modes``: the library has no public way to ask without uploading) and refuses
  before any upload starts.
- **Answers it cannot read.** huggingface_hub parses the commit answer's URLs and the details' fields as it
  receives them and raises ``ValueError`` / ``KeyError`` / ``TypeError`` on a hostile or broken answer
  (``commitUrl: "x"``, details without ``filesWithConflicts``). Our inputs are validated before each call,
  so inside these calls those errors come from the answer, and become ``HubRefused`` naming what was asked.
  A PR URL is kept only when it is on the endpoint's origin and names this repo's discussion: a Hub (or a
  man in the middle of a development endpoint) cannot make meshdash link readers elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub._commit_api import _fetch_upload_modes

from packages_app.hub.client import HubConfig, config_from_settings, default_endpoint
from packages_app.hub.errors import EXPECTED_ERRORS, HubError, HubRefused, translate
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import Policy, bounded_call, origin_of, show_origin
from packages_app.hub.records import SHA_RE

T = TypeVar("T")
PR_STATUSES = ("draft", "open", "merged", "closed")
MAX_UPLOAD_BYTES = 4 * 1024 * 1024  # one regular file in one commit; a manifest is far smaller
# What huggingface_hub raises while reading an answer it cannot use (see the module docstring).
ANSWER_ERRORS = (ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class PullRequest:
    num: int
    url: str
    status: str  # draft | open | merged | closed
    head_sha: str | None = None
    merge_commit: str | None = None
    target: str = "refs/heads/main"
    author: str = ""  # whose token opened it, as the Hub names them


class RegularOnlyApi(HfApi):
    """HfApi whose uploads stay inside the commit: an LFS (or Xet) upload mode is refused, not uploaded."""

    def preupload_lfs_files(  # the keywords create_commit passes; the rest ignored
        self,
        repo_id: str,
        additions: Iterable[CommitOperationAdd],
        *,
        token: str | bool | None = None,
        repo_type: str | None = None,
        revision: str | None = None,
        create_pr: bool | None = None,
        **ignored: Any,
    ) -> None:
        additions = list(additions)
        too_big = [a.path_in_repo for a in additions if a.upload_info.size > MAX_UPLOAD_BYTES]
        if too_big:
            raise HubRefused(f"{too_big[0]} is over {MAX_UPLOAD_BYTES} bytes: meshdash uploads no large file")
        _fetch_upload_modes(
            additions=[a for a in additions if a._upload_mode is None],
            repo_type=repo_type or "model",
            repo_id=repo_id,
            headers=self._build_hf_headers(token=token),
            revision=quote(revision or "main", safe=""),
            endpoint=self.endpoint,
            create_pr=bool(create_pr),
        )
        lfs = [a.path_in_repo for a in additions if a._upload_mode != "regular" and not a._should_ignore]
        if lfs:
            raise HubRefused(
                f"the Hub asked for an LFS upload of {lfs[0]}; meshdash sends a manifest only as a regular "
                "file inside the commit (an LFS or Xet upload would leave the guarded client): nothing sent"
            )


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
        self.api: HfApi = RegularOnlyApi(endpoint=self.endpoint, token=token)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        with bounded_call(self.policy, what):
            try:
                return fn()
            except EXPECTED_ERRORS as exc:
                raise translate(exc, what, max_retry_after=self.config.limits.max_retry_after) from exc
            except ANSWER_ERRORS as exc:
                raise HubRefused(
                    f"{what}: the Hub's answer could not be read ({type(exc).__name__}: {str(exc)[:200]})"
                ) from exc

    def head(self, branch: str = "main") -> str:
        """The sha ``branch`` (or ``refs/pr/N``) points at now."""
        info = self._call(
            f"{self.repo_id}@{branch}", lambda: self.api.repo_info(self.repo_id, revision=branch)
        )
        sha = getattr(info, "sha", None)
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            raise HubError(f"{self.repo_id}@{branch}: the Hub did not return a commit sha")
        return sha

    def open_pull_request(
        self, base_sha: str, path: str, content: bytes, title: str, description: str
    ) -> PullRequest | None:
        """A PR against main made from ``base_sha``, changing ``path`` only; None when the Hub says that file
        already holds ``content`` (huggingface_hub then makes no commit and names no PR)."""
        if not SHA_RE.match(base_sha):
            raise HubError(f"{base_sha[:60]!r} is not a 40-hex commit sha")
        what = f"{self.repo_id}: pull request from {base_sha[:12]}"
        info = self._commit_file(
            what, path, content, title, description, create_pr=True, parent_commit=base_sha
        )
        if info.pr_url is None:
            return None
        num, url = self.pull_request_url(str(info.pr_url), what)
        return PullRequest(num, url, "open", head_sha=self._sha(info.oid, what))

    def update_pull_request(
        self, num: int, path: str, content: bytes, title: str, description: str
    ) -> str | None:
        """A commit to ``refs/pr/{num}`` setting ``path`` to ``content``: its sha; None if nothing changed."""
        ref = f"refs/pr/{num}"
        what = f"{self.repo_id}: update of pull request #{num}"
        before = self.head(ref)
        info = self._commit_file(what, path, content, title, description, revision=ref, parent_commit=before)
        after = self._sha(info.oid, what)
        return None if after == before else after

    def _commit_file(
        self, what: str, path: str, content: bytes, title: str, description: str, **where: Any
    ) -> Any:
        """One commit of one regular file (``where``: ``create_pr`` or ``revision``; ``parent_commit``)."""
        return self._call(
            what,
            lambda: self.api.create_commit(
                self.repo_id,
                [CommitOperationAdd(path, content)],
                commit_message=title,
                commit_description=description,
                **where,
            ),
        )

    def comment(self, num: int, text: str) -> str:
        """A comment on the discussion or PR ``num``; the Hub's id of it."""
        what = f"{self.repo_id}: comment on #{num}"
        event = self._call(what, lambda: self.api.comment_discussion(self.repo_id, num, text))
        comment_id = getattr(event, "id", None)
        if not isinstance(comment_id, str) or not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", comment_id):
            raise HubRefused(f"{what}: the Hub did not answer with a comment id")
        return comment_id

    def pull_request(self, num: int) -> PullRequest:
        what = f"{self.repo_id}: pull request #{num}"
        details = self._call(what, lambda: self.api.get_discussion_details(self.repo_id, num))
        return self._call(what, lambda: self._read_details(details, num, what))

    def _read_details(self, details: Any, num: int, what: str) -> PullRequest:
        if not details.is_pull_request or details.num != num:
            raise HubRefused(f"{what}: the Hub answered about another discussion")
        status = details.status if details.status in PR_STATUSES else "open"
        head = next((getattr(e, "oid", None) for e in reversed(details.events) if e.type == "commit"), None)
        merge = details.merge_commit_oid
        return PullRequest(
            num=num,
            url=self.discussion_url(num),
            status=status,
            head_sha=head if isinstance(head, str) and SHA_RE.match(head) else None,
            merge_commit=merge if isinstance(merge, str) and SHA_RE.match(merge) else None,
            target=str(details.target_branch or "refs/heads/main")[:200],
            author=str(details.author or "")[:150],
        )

    def discussion_url(self, num: int) -> str:
        """The PR's web URL as meshdash builds it: the endpoint's origin, this repo, the number."""
        return f"{self.endpoint}/{self.repo_id}/discussions/{num}"

    def pull_request_url(self, url: str, what: str) -> tuple[int, str]:
        """The number of the PR ``url`` names, and its URL: refused unless this repo's, on the endpoint."""
        match = re.fullmatch(rf"/{re.escape(self.repo_id)}/discussions/(\d{{1,9}})", urlsplit(url).path)
        origin = origin_of(url)
        if origin != self.policy.endpoint or match is None:
            raise HubRefused(
                f"{what}: the Hub named the pull request {url[:120]!r}, which is not a discussion of "
                f"{self.repo_id} on {show_origin(self.policy.endpoint)}"
            )
        num = int(match.group(1))
        return num, self.discussion_url(num)

    @staticmethod
    def _sha(value: object, what: str) -> str:
        if not isinstance(value, str) or not SHA_RE.match(value):
            raise HubRefused(f"{what}: the Hub did not answer with a commit sha")
        return value
