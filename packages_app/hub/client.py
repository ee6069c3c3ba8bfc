"""The Hub client: a package repo on a Hub-compatible server (``HF_ENDPOINT``) read through
huggingface_hub, plus the namespace and catalog listings discovery uses.

Everything is pinned to 40-hex commit shas. Django's settings are read lazily (and only when Django
is configured) for the endpoint; nothing else of Django is imported.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

from packages_app.hub.errors import EXPECTED_ERRORS, HubError, InvalidRepoId, translate
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import ranged_get
from packages_app.hub.records import (
    MANIFEST_MAX_BYTES,
    MANIFEST_PATH,
    SHA_RE,
    CommitInfo,
    FetchStats,
    RemoteFile,
)

PUBLIC_ENDPOINT = "https://huggingface.co"
T = TypeVar("T")


def default_endpoint() -> str:
    try:
        from django.conf import settings

        return str(settings.HF_ENDPOINT).rstrip("/")
    except Exception:  # outside Django (the pure CLI), fall back to the environment
        return os.environ.get("HF_ENDPOINT", PUBLIC_ENDPOINT).rstrip("/")


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


class HubSource:
    """A package repo on a Hub-compatible server (``HF_ENDPOINT``), read through huggingface_hub."""

    def __init__(
        self,
        repo_id: str,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        repo_type: str = "model",
        max_retries: int = 4,
        stats: FetchStats | None = None,
    ) -> None:
        self.repo_id = validate_repo_id(repo_id)
        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self.token = (token if token is not None else _token()) or None
        self.repo_type = repo_type
        self.max_retries = max_retries
        self.stats = stats or FetchStats()
        self.api = HfApi(endpoint=self.endpoint, token=self.token or False)
        self.label = f"hf://{repo_id}"

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except EXPECTED_ERRORS as exc:  # huggingface_hub's errors, and httpx2's once its retries are spent
            raise translate(exc, what) from exc

    def resolve_revision(self, revision: str | None) -> str:
        """A branch, tag or sha -> the 40-hex commit sha it points at now."""
        rev = revision or "main"
        what = f"{self.repo_id}@{rev}"
        info = self._call(
            what, lambda: self.api.repo_info(self.repo_id, revision=rev, repo_type=self.repo_type)
        )
        sha = getattr(info, "sha", None)
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            raise HubError(f"{what}: the Hub did not return a commit sha")
        return sha

    def list_commits(self, head: str | None = None) -> list[CommitInfo]:
        """The history behind ``head`` (a pinned sha; default: the default branch), newest first."""
        commits = self._call(
            f"{self.repo_id} commits",
            lambda: self.api.list_repo_commits(self.repo_id, revision=head, repo_type=self.repo_type),
        )
        return [
            CommitInfo(sha=c.commit_id, date=c.created_at, title=(c.title or "")[:500])
            for c in commits
            if SHA_RE.match(c.commit_id)
        ]

    def read_manifest(self, sha: str) -> bytes:
        return self.read_small_file(sha, MANIFEST_PATH, MANIFEST_MAX_BYTES)

    def read_small_file(self, sha: str, path: str, limit: int) -> bytes:
        """A whole small file, refused past ``limit`` bytes (read as a range so a huge one costs nothing)."""
        data = self.read_range(sha, path, 0, limit + 1)
        if len(data) > limit:
            raise HubError(f"{self.repo_id}@{sha[:12]}/{path} is larger than {limit} bytes")
        return data

    def list_files(self, sha: str) -> list[RemoteFile]:
        def fetch() -> list[RemoteFile]:
            entries = self.api.list_repo_tree(
                self.repo_id, revision=sha, recursive=True, repo_type=self.repo_type
            )
            return [_remote_file(e) for e in entries if isinstance(e, RepoFile)]

        files = self._call(f"{self.repo_id}@{sha[:12]} file list", fetch)
        return sorted(files, key=lambda f: f.path)

    def url(self, sha: str, path: str) -> str:
        return hf_hub_url(self.repo_id, path, revision=sha, repo_type=self.repo_type, endpoint=self.endpoint)

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        """Bytes [start, start+length) of a file at a commit, or fewer at the end of the file."""
        headers = build_hf_headers(token=self.token or False)
        what = f"{self.repo_id}@{sha[:12]}/{path}"
        url = self.url(sha, path)
        data = ranged_get(url, start, length, headers=headers, what=what, max_retries=self.max_retries)
        self.stats.add(len(data))
        return data


def _remote_file(entry: RepoFile) -> RemoteFile:
    lfs = entry.lfs
    sha256 = lfs.sha256 if lfs is not None else None
    return RemoteFile(path=entry.path, size=int(entry.size), lfs_sha256=sha256, blob_id=entry.blob_id or "")


def list_namespace_packages(namespace: str, *, endpoint: str | None = None) -> list[str]:
    """Model repos of ``namespace`` named like layer packages (``...-layers``)."""
    api = HfApi(endpoint=endpoint or default_endpoint(), token=_token() or False)
    try:
        models = list(api.list_models(author=namespace, search="-layers"))
    except EXPECTED_ERRORS as exc:
        raise translate(exc, f"models of {namespace}") from exc
    return sorted({m.id for m in models if m.id.endswith("-layers") and "/" in m.id})


def catalog_package_repos(dataset_id: str, *, endpoint: str | None = None) -> list[str]:
    """Package repos listed by the curated ``meshllm/catalog`` dataset (``entries/<owner>/<repo>.json``)."""
    source = HubSource(dataset_id, endpoint=endpoint, repo_type="dataset")
    sha = source.resolve_revision(None)
    repos: set[str] = set()
    for f in source.list_files(sha):
        if not (f.path.startswith("entries/") and f.path.endswith(".json")) or f.size > 1024 * 1024:
            continue
        try:
            entry = json.loads(source.read_small_file(sha, f.path, 1024 * 1024))
        except (ValueError, HubError):
            continue
        repos.update(_catalog_entry_repos(entry))
    return sorted(repos)


def _catalog_entry_repos(entry: object) -> Iterator[str]:
    variants = entry.get("variants") if isinstance(entry, dict) else None
    for variant in variants.values() if isinstance(variants, dict) else ():
        for pkg in variant.get("packages", []) if isinstance(variant, dict) else ():
            repo = pkg.get("repo") if isinstance(pkg, dict) else None
            if isinstance(repo, str) and pkg.get("type", "layer-package") == "layer-package":
                try:
                    yield validate_repo_id(repo)
                except InvalidRepoId:
                    continue
