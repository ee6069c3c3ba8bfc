"""sha256 of a local package folder's artifacts, streamed with a progress bar (mesh-llm's preflight).

Reads local files only, in bounded chunks; no Django, no network. It computes digests and reports
files it cannot read; comparing them with the manifest stays with the audit's file check, which
already compares existence and size, so the rule has one owner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Candidate:
    """A file to hash: its path inside the folder and its size on disk."""

    path: str
    size: int


@dataclass
class Digests:
    sha256: dict[str, str] = field(default_factory=dict)  # path -> sha256 of the file's bytes
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why it could not be read


def hash_files(root: Path, candidates: Sequence[Candidate], progress: TextIO | None = None) -> Digests:
    """Hash each candidate under `root`; one progress bar over all their bytes on `progress`."""
    out = Digests()
    total = sum(c.size for c in candidates)
    with tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="verifying sha256",
        file=progress,
        disable=progress is None or not candidates,
        mininterval=0.5,
    ) as bar:
        for candidate in candidates:
            bar.set_postfix_str(candidate.path, refresh=False)
            try:
                out.sha256[candidate.path] = _sha256(root / candidate.path, bar)
            except OSError as exc:
                out.unreadable[candidate.path] = exc.strerror or type(exc).__name__
    return out


def _sha256(path: Path, bar: tqdm[None]) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()
