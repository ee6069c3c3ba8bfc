"""Package sources that are not a Hub repo: a local package folder, one plain http(s) URL, and
``hf://`` URIs. Local reads touch only the folder given; URL reads go through ``net.ranged_get``.
Imports nothing from Django.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from packages_app.hub.client import config_from_settings
from packages_app.hub.errors import HubError, HubNotFound
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import Policy, bounded_call, ranged_get
from packages_app.hub.records import MANIFEST_MAX_BYTES, MANIFEST_PATH, CommitInfo, FetchStats, RemoteFile

LOCAL_REVISION = "0" * 40
HF_URI_RE = re.compile(r"^hf://(?P<repo>[^/@]+/[^/@]+)@(?P<rev>[^/]+)/(?P<path>.+)$")


def read_local_range(path: Path, start: int, length: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(start)
        return fh.read(max(0, length))


class LocalFolderSource:
    """A package folder on disk (a builder's pre-publish check): one pseudo-revision, no network.

    There is no Hub LFS digest for local files; sha256 is computed only when ``hash_files`` is set,
    since it reads every byte of multi-GB files.
    """

    def __init__(self, folder: str | os.PathLike[str], *, hash_files: bool = False) -> None:
        self.root = Path(folder).resolve()
        if not self.root.is_dir():
            raise HubNotFound(f"{folder}: not a folder")
        self.hash_files = hash_files
        # Not a Hub repo: nothing the Hub could keep private; an operator ingesting a folder shows it.
        self.private: bool | None = False
        self.stats = FetchStats()
        self.label = str(self.root)

    def resolve_revision(self, revision: str | None) -> str:
        return LOCAL_REVISION

    def list_commits(self, head: str | None = None) -> list[CommitInfo]:
        return [CommitInfo(sha=LOCAL_REVISION, date=None, title="local folder")]

    def _path(self, path: str) -> Path:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts:
            raise HubNotFound(f"{path}: not a path inside the package")
        full = self.root.joinpath(*pure.parts)
        if not full.is_file():
            raise HubNotFound(f"{self.root}/{path}: file not found")
        return full

    def read_manifest(self, sha: str) -> bytes:
        full = self._path(MANIFEST_PATH)
        with full.open("rb") as fh:
            data = fh.read(MANIFEST_MAX_BYTES + 1)
        if len(data) > MANIFEST_MAX_BYTES:
            raise HubError(f"{full} is larger than {MANIFEST_MAX_BYTES} bytes")
        return data

    def list_files(self, sha: str) -> list[RemoteFile]:
        files = []
        for full in sorted(self.root.rglob("*")):
            if not full.is_file() or full.is_symlink() or ".git" in full.relative_to(self.root).parts:
                continue
            rel = full.relative_to(self.root).as_posix()
            digest = _sha256_file(full) if self.hash_files else None
            files.append(RemoteFile(path=rel, size=full.stat().st_size, lfs_sha256=digest))
        return files

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        data = read_local_range(self._path(path), start, length)
        self.stats.add(len(data))
        return data


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class UrlSource:
    """One plain ``http(s)://`` URL, read with ranged GETs through the guarded session: redirects only to
    the URL's own origin or the Hub's CDN origins (a Hub ``resolve`` URL redirects there)."""

    def __init__(self, url: str, *, development: bool | None = None) -> None:
        """``development`` (default: MESHDASH_HUB_DEV): plain http and private addresses are allowed."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HubError(f"{url!r} is not an http(s) URL")
        self.url = url
        self.stats = FetchStats()
        self.label = url
        config = config_from_settings()
        dev = config.development if development is None else development
        self.policy = Policy.for_endpoint(url, config.cdn_origins, development=dev, limits=config.limits)

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        with bounded_call(self.policy, self.url):
            data = ranged_get(self.url, start, length, headers={}, what=self.url)
        self.stats.add(len(data))
        return data


def parse_hf_uri(uri: str) -> tuple[str, str, str]:
    """``hf://owner/repo@revision/path`` -> (repo_id, revision, path)."""
    match = HF_URI_RE.match(uri)
    if not match:
        raise HubError(f"{uri!r} is not of the form hf://owner/repo@revision/path")
    return validate_repo_id(match["repo"]), match["rev"], match["path"]
