"""devhub's on-disk layout: content-addressed blobs plus one JSON record per repo (commits, refs, files).

Layout under a root folder::

    devhub.json                          marker: generator version, what was generated
    blobs/<k[:2]>/<k>                    file contents; GGUF blobs are sparse (header + hole)
    repos/models/<owner>/<name>.json     a RepoRecord: flags, refs, commits (oldest first)
    repos/datasets/<owner>/<name>.json

A blob key is the file's LFS oid for LFS files and the sha256 of the content for regular git files.
Nothing here knows about GGUF or manifests; the generator writes records, the server reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
REPO_TYPES = ("model", "dataset")
_CHUNK = 1 << 20
SHORT_SHA_MIN = 4  # the shortest prefix taken for a commit, as git rev-parse takes (meshdash's pages too)


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob, as the Hub reports it in `blob_id` / `oid`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def lfs_pointer(oid: str, size: int) -> bytes:
    return LFS_POINTER.format(oid=oid, size=size).encode()


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit: where its bytes live and how the Hub describes it."""

    size: int
    blob: str
    git_oid: str
    lfs_sha256: str | None = None

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.lfs_sha256 or "", self.size)) if self.lfs_sha256 else 0

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "blob": self.blob, "git_oid": self.git_oid, "lfs": self.lfs_sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileEntry:
        return cls(size=data["size"], blob=data["blob"], git_oid=data["git_oid"], lfs_sha256=data["lfs"])


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    date: datetime
    title: str
    message: str
    author: str
    files: Mapping[str, FileEntry]

    def to_json(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "parents": list(self.parents),
            "date": self.date.isoformat(),
            "title": self.title,
            "message": self.message,
            "author": self.author,
            "files": {path: entry.to_json() for path, entry in sorted(self.files.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Commit:
        files = {path: FileEntry.from_json(entry) for path, entry in data["files"].items()}
        return cls(
            sha=data["sha"],
            parents=tuple(data["parents"]),
            date=datetime.fromisoformat(data["date"]),
            title=data["title"],
            message=data["message"],
            author=data["author"],
            files=files,
        )


@dataclass
class RepoRecord:
    """A repo as the server sees it. `gated` is False or the Hub's gating mode ("auto"/"manual")."""

    repo_id: str
    repo_type: str
    created_at: datetime
    private: bool = False
    gated: str | bool = False
    tags: tuple[str, ...] = ()
    card_data: Mapping[str, Any] = field(default_factory=dict)
    commits: list[Commit] = field(default_factory=list)
    branches: dict[str, str] = field(default_factory=dict)
    tag_refs: dict[str, str] = field(default_factory=dict)
    pr_refs: dict[str, str] = field(default_factory=dict)  # "refs/pr/N" -> sha, written by devhub's PRs

    @property
    def author(self) -> str:
        return self.repo_id.split("/", 1)[0]

    def commit(self, sha: str) -> Commit | None:
        return next((c for c in self.commits if c.sha == sha), None)

    def resolve(self, revision: str) -> Commit | None:
        """Branch, tag, `refs/heads/x`, `refs/tags/x`, `refs/pr/N`, a full or short sha -> the commit."""
        if revision in self.pr_refs:
            return self.commit(self.pr_refs[revision])
        for prefix, refs in (("refs/heads/", self.branches), ("refs/tags/", self.tag_refs)):
            name = revision.removeprefix(prefix)
            if name in refs:
                return self.commit(refs[name])
        if len(revision) == 40:
            return self.commit(revision.lower())
        return self._by_prefix(revision.lower())

    def _by_prefix(self, prefix: str) -> Commit | None:
        """A short sha, as the Hub resolves one since 2023 (huggingface/huggingface_hub#197; docs/domain.md
        section 8): the one commit it starts, none when it starts several or is not hex."""
        if not (SHORT_SHA_MIN <= len(prefix) < 40) or prefix.strip("0123456789abcdef"):
            return None
        found = [c for c in self.commits if c.sha.startswith(prefix)]
        return found[0] if len(found) == 1 else None

    def history(self, head: Commit) -> list[Commit]:
        """First-parent history from `head`, newest first."""
        chain: list[Commit] = []
        current: Commit | None = head
        while current is not None and len(chain) <= len(self.commits):
            chain.append(current)
            current = self.commit(current.parents[0]) if current.parents else None
        return chain

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "repo_type": self.repo_type,
            "created_at": self.created_at.isoformat(),
            "private": self.private,
            "gated": self.gated,
            "tags": list(self.tags),
            "card_data": dict(self.card_data),
            "branches": self.branches,
            "tag_refs": self.tag_refs,
            "commits": [c.to_json() for c in self.commits],
        } | ({"pr_refs": self.pr_refs} if self.pr_refs else {})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RepoRecord:
        return cls(
            repo_id=data["repo_id"],
            repo_type=data["repo_type"],
            created_at=datetime.fromisoformat(data["created_at"]),
            private=data["private"],
            gated=data["gated"],
            tags=tuple(data["tags"]),
            card_data=data["card_data"],
            branches=dict(data["branches"]),
            tag_refs=dict(data["tag_refs"]),
            pr_refs=dict(data.get("pr_refs") or {}),
            commits=[Commit.from_json(c) for c in data["commits"]],
        )


class Store:
    """Reads and writes one devhub root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.repos = root / "repos"

    def blob_path(self, key: str) -> Path:
        return self.blobs / key[:2] / key

    def put_bytes(self, content: bytes) -> FileEntry:
        """Store a regular (non-LFS) git file."""
        key = hashlib.sha256(content).hexdigest()
        path = self.blob_path(key)
        if not path.exists():
            _write_atomically(path, content)
        return FileEntry(size=len(content), blob=key, git_oid=git_blob_sha1(content))

    def put_lfs_file(self, tmp: Path, oid: str, size: int) -> FileEntry:
        """Move an already-written (sparse) file in as the LFS object `oid` of `size` bytes."""
        path = self.blob_path(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            tmp.unlink()
        else:
            os.replace(tmp, path)
        return FileEntry(size=size, blob=oid, git_oid=git_blob_sha1(lfs_pointer(oid, size)), lfs_sha256=oid)

    def record_path(self, repo_type: str, repo_id: str) -> Path:
        return self.repos / f"{repo_type}s" / f"{repo_id}.json"

    def save_repo(self, record: RepoRecord) -> None:
        text = json.dumps(record.to_json(), indent=1, sort_keys=True)
        _write_atomically(self.record_path(record.repo_type, record.repo_id), text.encode())

    def load_repos(self) -> dict[tuple[str, str], RepoRecord]:
        """Every repo under the root, keyed by (repo_type, repo_id)."""
        records: dict[tuple[str, str], RepoRecord] = {}
        for path in self._record_files():
            record = RepoRecord.from_json(json.loads(path.read_text()))
            records[(record.repo_type, record.repo_id)] = record
        return records

    def _record_files(self) -> Iterator[Path]:
        for repo_type in REPO_TYPES:
            yield from sorted((self.repos / f"{repo_type}s").glob("*/*.json"))


def _write_atomically(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def copy_sparse(src: Path, dest: Path) -> None:
    """Copy a file, keeping its holes as holes (the GGUF blobs are mostly hole)."""
    size = src.stat().st_size
    with src.open("rb") as fin, dest.open("wb") as fout:
        for start, end in _data_extents(fin.fileno(), size):
            fin.seek(start)
            fout.seek(start)
            remaining = end - start
            while remaining > 0 and (chunk := fin.read(min(_CHUNK, remaining))):
                fout.write(chunk)
                remaining -= len(chunk)
        fout.truncate(size)


def _data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of the regions holding data; the whole file where holes cannot be found."""
    if not hasattr(os, "SEEK_DATA"):
        yield 0, size
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after pos
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        pos = end
