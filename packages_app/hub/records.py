"""The plain records a package source hands out (commits, files, fetch counters) and the source interfaces.

Imports nothing from Django and nothing from huggingface_hub.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from packages_app import layout
from packages_app.repo_ids import COMMIT_SHA_RE

MANIFEST_PATH = layout.MANIFEST_FILE
MANIFEST_MAX_BYTES = layout.MAX_MANIFEST_BYTES
SHA_RE = re.compile(f"^{COMMIT_SHA_RE.pattern}$")


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    date: datetime | None
    title: str


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    lfs_sha256: str | None = None
    blob_id: str = ""


@dataclass
class FetchStats:
    """Requests and bytes spent on ranged reads; shared by the threads of one ingest."""

    requests: int = 0
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.requests += 1
            self.bytes += nbytes


class RangeReader(Protocol):
    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes: ...


class PackageSource(Protocol):
    """What ingest and audit need from wherever a package lives."""

    label: str

    def resolve_revision(self, revision: str | None) -> str: ...

    def list_commits(self, head: str | None = None) -> list[CommitInfo]: ...

    def read_manifest(self, sha: str) -> bytes: ...

    def list_files(self, sha: str) -> list[RemoteFile]: ...

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes: ...
