"""Read-only inspection of a source, without the database: one GGUF header, or a whole package audit.

The header-reading plan (which files, in which order, which to skip) lives here so that the
``audit_package`` command and the ingest service read a package the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from packages_app import audit as auditing
from packages_app import hub
from packages_app import verify as verify_mod
from packages_app.layout import METADATA_ONLY_KEY, FileRole, classify_path
from packages_app.manifest import Problem

METADATA_READ_CAP = 64 * 1024 * 1024


def header_order(paths: list[str]) -> list[str]:
    """Metadata first (it describes everything in v2), then layers in order, then the rest."""

    def key(path: str) -> tuple[int, int, str]:
        place = classify_path(path)
        rank = {FileRole.METADATA: 0, FileRole.LAYER: 1}.get(place.role, 2)
        return rank, place.layer if place.layer is not None else -1, path

    return sorted(paths, key=key)


def fetch_package_headers(
    source: hub.RangeReader,
    sha: str,
    files: list[hub.RemoteFile],
    *,
    schema_version: int | None,
    concurrency: int = 8,
    on_result: Callable[[hub.HeaderResult], None] | None = None,
    on_skipped: Callable[[list[str]], None] | None = None,
) -> list[hub.HeaderResult]:
    """Read the GGUF headers a package needs.

    For schema v2, ``shared/metadata.gguf`` holds every KV and the full tensor directory and no
    tensor data, so it is read whole in one request, and the layer files are read only when it
    turns out not to describe them (no ``skippy.package.metadata_only``).
    """
    ordered = header_order([f.path for f in files if f.path.endswith(".gguf")])
    fetcher = hub.HeaderFetcher(source, sha, concurrency=concurrency)
    metadata = [p for p in ordered if classify_path(p).role is FileRole.METADATA]
    if schema_version != 2 or not metadata:
        return fetcher.fetch(ordered, on_result)
    sizes = {f.path: f.size for f in files}
    whole = min(sizes[metadata[0]], METADATA_READ_CAP) or hub.FIRST_READ
    results = fetcher.fetch(metadata, on_result, first_read=whole)
    rest = [p for p in ordered if p not in metadata]
    if any(r.header is not None and r.header.kv.get(METADATA_ONLY_KEY) and r.header.tensors for r in results):
        skipped = [p for p in rest if classify_path(p).role is FileRole.LAYER]
        rest = [p for p in rest if p not in skipped]
        if on_skipped and skipped:
            on_skipped(skipped)
    # Shared files repeat the metadata's KV block, so its size is the right first read for them;
    # v2 layer files (read only when the metadata does not describe them) have small headers.
    shared = [p for p in rest if classify_path(p).role is not FileRole.LAYER]
    layers = [p for p in rest if classify_path(p).role is FileRole.LAYER]
    return results + fetcher.fetch(shared, on_result, learned=results[0]) + fetcher.fetch(layers, on_result)


@dataclass(frozen=True)
class PackageAudit:
    audit: auditing.Audit
    source: str
    revision: str
    requests: int
    bytes: int


def open_package_source(spec: str) -> hub.HubSource | hub.LocalFolderSource:
    """A local folder if ``spec`` names one, else a Hub repo id (validated before any request)."""
    if Path(spec).is_dir():
        return hub.LocalFolderSource(spec)
    return hub.HubSource(spec)


def audit_source(
    source: hub.HubSource | hub.LocalFolderSource,
    revision: str | None = None,
    *,
    verify: bool = False,
    progress: TextIO | None = None,
) -> PackageAudit:
    """Audit one revision straight from its source: manifest, file list, headers. Writes nothing.

    With ``verify``, a local folder's artifacts are also hashed (streamed, a progress bar on
    ``progress``) so their sha256 is checked against the manifest as the Hub's LFS digest would be.
    """
    sha = source.resolve_revision(revision)
    try:
        manifest: bytes | None = source.read_manifest(sha)
    except hub.HubNotFound:
        manifest = None
    files = source.list_files(sha)
    schema = _schema_version(manifest)
    results = fetch_package_headers(source, sha, files, schema_version=schema)
    headers = {r.path: r.header.to_json() for r in results if r.header is not None}
    errors = {r.path: r.error for r in results if r.header is None}
    listing = [auditing.FileInfo(path=f.path, size=f.size, lfs_sha256=f.lfs_sha256) for f in files]
    local = isinstance(source, hub.LocalFolderSource)
    shown_revision = None if local else sha
    scope: auditing.Scope = "folder" if local else "revision"
    again = _audit_source_arg(source, sha)
    result = auditing.audit(manifest, listing, headers, shown_revision, errors, scope, again)
    if verify and isinstance(source, hub.LocalFolderSource):
        digests = verify_mod.hash_files(source.root, _hash_candidates(result, listing), progress)
        listing = [replace(f, lfs_sha256=digests.sha256.get(f.path, f.lfs_sha256)) for f in listing]
        result = auditing.audit(manifest, listing, headers, None, errors, scope, again)
        result = replace(result, problems=result.problems + _unreadable_problems(digests))
    return PackageAudit(result, source.label, sha, source.stats.requests, source.stats.bytes)


def _audit_source_arg(source: hub.HubSource | hub.LocalFolderSource, sha: str) -> str:
    """What ``audit_package`` takes to read this package again: the folder, or the repo at the sha."""
    if isinstance(source, hub.LocalFolderSource):
        return str(source.root)
    return f"{source.label} --revision {sha}"


def _hash_candidates(result: auditing.Audit, listing: list[auditing.FileInfo]) -> list[verify_mod.Candidate]:
    """Artifacts worth hashing: present, of the size the manifest records, with a sha256 to compare."""
    on_disk = {f.path: f.size for f in listing}
    wanted: dict[str, int] = {}
    for a in result.manifest.artifacts if result.manifest else ():
        size = on_disk.get(a.path)
        if a.sha256 and size is not None and a.size in (None, size):
            wanted[a.path] = size
    return [verify_mod.Candidate(path, size) for path, size in sorted(wanted.items())]


def _unreadable_problems(digests: verify_mod.Digests) -> list[Problem]:
    return [
        Problem(
            "artifact_sha256_unreadable",
            "error",
            f"{path} could not be read to check its sha256 ({why}).",
            {"path": path},
        )
        for path, why in sorted(digests.unreadable.items())
    ]


def _schema_version(manifest: bytes | None) -> int | None:
    if manifest is None:
        return None
    try:
        value = json.loads(manifest).get("schema_version")
    except (ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, int) else None


class LocalFileReader:
    """Ranged reads of one local file, counted like remote ones (inspect_gguf on a path)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise hub.HubNotFound(f"{path}: no such file")
        self.stats = hub.FetchStats()

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        data = hub.read_local_range(self.path, start, length)
        self.stats.add(len(data))
        return data


def inspect_header(spec: str) -> tuple[hub.HeaderResult, hub.FetchStats]:
    """One file's header from a local path, an http(s) URL or ``hf://owner/repo@revision/path``."""
    if spec.startswith("hf://"):
        repo_id, revision, path = hub.parse_hf_uri(spec)
        source = hub.HubSource(repo_id)
        sha = source.resolve_revision(revision)
        return hub.read_header(source, sha, path), source.stats
    if spec.startswith(("http://", "https://")):
        url_source = hub.UrlSource(spec)
        return hub.read_header(url_source, "", spec), url_source.stats
    local = LocalFileReader(spec)
    return hub.read_header(local, "", spec), local.stats
