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


@dataclass(frozen=True)
class CuratedCatalogRow:
    """One package row of the curated catalog dataset (``entries/<owner>/<repo>.json``): which package a
    variant lists, and ``source_revision``, the *source model's* revision (not the package's; docs/rules.md
    section 6b)."""

    repo: str
    entry: str  # the entry file, e.g. entries/unsloth/Qwen3.5-35B-A3B-MTP-GGUF.json
    variant: str
    source_repo: str = ""
    source_revision: str = ""
    layer_count: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "entry": self.entry,
            "variant": self.variant,
            "source_repo": self.source_repo,
            "source_revision": self.source_revision,
            "layer_count": self.layer_count,
        }


@dataclass(frozen=True)
class ModelCard:
    """What a package's model card says (the Hub's cardData and tags), as mesh-llm's writer fills it
    (docs/rules.md section 6b, card.rs): the source model it was cut from, and the experimental tag."""

    base_model: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    library_name: str = ""

    @property
    def experimental(self) -> bool:
        return "experimental" in self.tags


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
