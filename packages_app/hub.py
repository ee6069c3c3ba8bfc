"""The only module that talks to the Hugging Face Hub (through huggingface_hub), plus a local-folder
source with the same interface.

Everything is pinned to 40-hex commit shas. GGUF headers are read with HTTP range requests through
the client's own session, sized from what the parser has seen so far, so a multi-GB file costs a few
megabytes; a package's later files reuse what the first one taught (see ``HeaderFetcher``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Protocol
from urllib.parse import urlsplit

from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, but not re-exported for mypy
    build_hf_headers,
    hf_raise_for_status,
    http_backoff,
)
from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id  # type: ignore[attr-defined]

from packages_app.gguf_header import GGUFHeader, GGUFHeaderError, HeaderParser

MANIFEST_PATH = "model-package.json"
MANIFEST_MAX_BYTES = 16 * 1024 * 1024
PUBLIC_ENDPOINT = "https://huggingface.co"
RETRY_STATUS = (429, 500, 502, 503, 504)
SHA_RE = re.compile(r"^[0-9a-f]{40}$")

# Range sizing. A first read of unknown size asks for FIRST_READ; the parser's estimate of the rest
# is padded by a small factor so the third request, when needed, is the last.
FIRST_READ = 256 * 1024
ESTIMATE_PAD = 1.06
TENSOR_INFO_SLACK = 16 * 1024


class HubError(Exception):
    """A Hub failure the caller can show as it is: one sentence naming the repo, revision or file."""

    retryable = False


class InvalidRepoId(HubError, ValueError):
    pass


class HubNotFound(HubError):
    pass


class HubUnauthorized(HubError):
    pass


class HubUnavailable(HubError):
    """429, 5xx or a network failure that outlived the client's own retries: try again later."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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


class PackageSource(Protocol):
    """What ingest and audit need from wherever a package lives."""

    label: str

    def resolve_revision(self, revision: str | None) -> str: ...

    def list_commits(self, head: str | None = None) -> list[CommitInfo]: ...

    def read_manifest(self, sha: str) -> bytes: ...

    def list_files(self, sha: str) -> list[RemoteFile]: ...

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes: ...


# --- repo ids ---------------------------------------------------------------------------------

_PART_RE = re.compile(r"^[A-Za-z0-9._-]{1,96}$")


def validate_repo_id(repo_id: str) -> str:
    """Refuse anything but ``owner/name`` before a request is made: never a URL, path or trick.

    The messages say what is wrong, for the track form, the commands and the webhook alike;
    huggingface_hub's own validator has the last word.
    """
    if not isinstance(repo_id, str) or not repo_id:
        raise InvalidRepoId("the repo id is empty")
    if "://" in repo_id or repo_id.startswith(("/", "~")) or "\\" in repo_id:
        raise InvalidRepoId(
            f"{repo_id!r} is not a URL or a path; a repo id is owner/name, e.g. meshllm/Model-layers"
        )
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise InvalidRepoId(f"{repo_id!r} is not owner/name, with exactly one slash")
    if "--" in repo_id or ".." in repo_id:
        raise InvalidRepoId(f"{repo_id!r}: a repo id cannot contain '--' or '..'")
    if repo_id.endswith(".git"):
        raise InvalidRepoId(f"{repo_id!r}: a repo id cannot end with '.git'")
    for part in parts:
        if not _PART_RE.match(part):
            raise InvalidRepoId(
                f"{repo_id!r}: owner and name are 1-96 characters of letters, digits, '.', '_' and '-'"
            )
        if part[0] in ".-" or part[-1] in ".-":
            raise InvalidRepoId(f"{repo_id!r}: owner and name cannot start or end with '.' or '-'")
    if len(repo_id) > 96:
        raise InvalidRepoId(
            f"{repo_id!r} is {len(repo_id)} characters long; a repo id is at most 96 characters"
        )
    try:
        hf_validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InvalidRepoId(f"{repo_id!r} is not a valid repo id: {exc}") from None
    return repo_id


# --- the Hub ----------------------------------------------------------------------------------


def default_endpoint() -> str:
    try:
        from django.conf import settings

        return str(settings.HF_ENDPOINT).rstrip("/")
    except Exception:  # outside Django (the pure CLI), fall back to the environment
        return os.environ.get("HF_ENDPOINT", PUBLIC_ENDPOINT).rstrip("/")


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def _translate(exc: Exception, what: str) -> HubError:
    """Map huggingface_hub's errors onto ours, with a sentence naming what was asked for."""
    if isinstance(exc, GatedRepoError):
        return HubUnauthorized(
            f"{what}: the repo is gated; set HF_TOKEN to an account that was granted access"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubNotFound(f"{what}: repository not found (or private: set HF_TOKEN)")
    if isinstance(exc, RevisionNotFoundError):
        return HubNotFound(f"{what}: revision not found")
    if isinstance(exc, EntryNotFoundError):
        return HubNotFound(f"{what}: file not found")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status == 401 or status == 403:
            return HubUnauthorized(f"{what}: the Hub refused access ({status}); check HF_TOKEN")
        if status == 404:
            return HubNotFound(f"{what}: not found (404)")
        if status in RETRY_STATUS:
            return HubUnavailable(f"{what}: the Hub answered {status}", _retry_after(exc.response.headers))
        return HubError(f"{what}: the Hub answered {status}")
    return HubUnavailable(f"{what}: {type(exc).__name__}: {exc}")


def _retry_after(headers: object) -> float | None:
    value = getattr(headers, "get", lambda _k: None)("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


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
        self.private: bool | None = None  # what the Hub's repo info said, once resolve_revision ran

    def _call(self, what: str, fn: Callable[[], object]) -> object:
        try:
            return fn()
        except HubError:
            raise
        except Exception as exc:  # huggingface_hub's errors, and httpx2's once its retries are spent
            raise _translate(exc, what) from exc

    def resolve_revision(self, revision: str | None) -> str:
        """A branch, tag or sha -> the 40-hex commit sha it points at now."""
        rev = revision or "main"
        what = f"{self.repo_id}@{rev}"
        info = self._call(
            what, lambda: self.api.repo_info(self.repo_id, revision=rev, repo_type=self.repo_type)
        )
        sha = getattr(info, "sha", None)
        self.private = bool(getattr(info, "private", False))
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            raise HubError(f"{what}: the Hub did not return a commit sha")
        return sha

    def list_commits(self, head: str | None = None) -> list[CommitInfo]:
        """The history behind ``head`` (a pinned sha; default: the default branch), newest first."""
        commits = self._call(
            f"{self.repo_id} commits",
            lambda: self.api.list_repo_commits(self.repo_id, revision=head, repo_type=self.repo_type),
        )
        assert isinstance(commits, list)
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
        assert isinstance(files, list)
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


def ranged_get(
    url: str, start: int, length: int, *, headers: dict[str, str], what: str, max_retries: int = 4
) -> bytes:
    """One ranged GET through huggingface_hub's session, retried on 429/5xx honouring Retry-After."""
    if length <= 0:
        return b""
    try:
        response = http_backoff(
            "GET",
            url,
            headers={**headers, "Range": f"bytes={start}-{start + length - 1}"},
            max_retries=max_retries,
            retry_on_status_codes=RETRY_STATUS,
        )
        if response.status_code == 416:  # asked past the end of the file
            return b""
        hf_raise_for_status(response)
    except Exception as exc:
        raise _translate(exc, what) from exc
    body: bytes = response.content
    if response.status_code == 200:  # the server ignored Range: keep only what was asked
        body = body[start : start + length]
    return body[:length]


def read_local_range(path: Path, start: int, length: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(start)
        return fh.read(max(0, length))


def _remote_file(entry: RepoFile) -> RemoteFile:
    lfs = entry.lfs
    sha256 = lfs.sha256 if lfs is not None else None
    return RemoteFile(path=entry.path, size=int(entry.size), lfs_sha256=sha256, blob_id=entry.blob_id or "")


def list_namespace_packages(namespace: str, *, endpoint: str | None = None) -> list[str]:
    """Model repos of ``namespace`` named like layer packages (``...-layers``)."""
    api = HfApi(endpoint=endpoint or default_endpoint(), token=_token() or False)
    try:
        models = list(api.list_models(author=namespace, search="-layers"))
    except Exception as exc:
        raise _translate(exc, f"models of {namespace}") from exc
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


# --- a local package folder -------------------------------------------------------------------

LOCAL_REVISION = "0" * 40


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


# --- a single file from anywhere (inspect_gguf) -------------------------------------------------


class UrlSource:
    """One plain ``http(s)://`` URL, read with ranged GETs through huggingface_hub's session."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HubError(f"{url!r} is not an http(s) URL")
        self.url = url
        self.stats = FetchStats()
        self.label = url

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        data = ranged_get(self.url, start, length, headers={}, what=self.url)
        self.stats.add(len(data))
        return data


HF_URI_RE = re.compile(r"^hf://(?P<repo>[^/@]+/[^/@]+)@(?P<rev>[^/]+)/(?P<path>.+)$")


def parse_hf_uri(uri: str) -> tuple[str, str, str]:
    """``hf://owner/repo@revision/path`` -> (repo_id, revision, path)."""
    match = HF_URI_RE.match(uri)
    if not match:
        raise HubError(f"{uri!r} is not of the form hf://owner/repo@revision/path")
    return validate_repo_id(match["repo"]), match["rev"], match["path"]


# --- reading GGUF headers -----------------------------------------------------------------------


class RangeReader(Protocol):
    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes: ...


@dataclass(frozen=True)
class HeaderResult:
    path: str
    header: GGUFHeader | None = None
    error: str = ""
    error_code: str = ""
    requests: int = 0
    bytes: int = 0


def read_header(source: RangeReader, sha: str, path: str, *, first_read: int = FIRST_READ) -> HeaderResult:
    """Parse one file's GGUF header from ranged reads sized by the parser's own estimate."""
    parser = HeaderParser()
    requests = 0
    want = first_read
    while True:
        data = source.read_range(sha, path, parser.received, want)
        requests += 1
        try:
            parser.feed(data)
        except GGUFHeaderError as exc:
            return HeaderResult(
                path, error=f"{path}: {exc}", error_code=exc.code, requests=requests, bytes=parser.received
            )
        if parser.done:
            return HeaderResult(path, header=parser.result(), requests=requests, bytes=parser.received)
        if len(data) < want:  # a short (or empty) read is the end of the file
            return HeaderResult(
                path,
                error=f"{path}: the file ends inside its GGUF header",
                error_code="truncated",
                requests=requests,
                bytes=parser.received,
            )
        want = _next_read(parser)


def _next_read(parser: HeaderParser) -> int:
    """Read up to the estimated end plus a margin: estimates from a vocabulary's early, short tokens
    run low, and one more round trip costs more than a few percent of extra bytes."""
    target = int(parser.estimate_total() * ESTIMATE_PAD) + 4096
    return max(parser.bytes_wanted(), target - parser.received)


class HeaderFetcher:
    """Reads the headers of many files of one revision concurrently, with a bound.

    The first file is read alone with no assumption about its size; the rest then start with one
    request sized from it (v1 layer files repeat the same multi-MB KV block), so a 41-file package
    costs about one request per file.
    """

    def __init__(self, source: RangeReader, sha: str, *, concurrency: int = 8) -> None:
        self.source = source
        self.sha = sha
        self.concurrency = max(1, concurrency)

    def fetch(
        self,
        paths: Sequence[str],
        on_result: Callable[[HeaderResult], None] | None = None,
        *,
        learned: HeaderResult | None = None,
        first_read: int = FIRST_READ,
    ) -> list[HeaderResult]:
        """Headers of ``paths``; ``learned`` is a header of the same package already read."""
        results: list[HeaderResult] = []
        rest = list(paths)
        if rest and (learned is None or learned.header is None):
            learned = read_header(self.source, self.sha, rest.pop(0), first_read=first_read)
            results.append(learned)
            if on_result:
                on_result(learned)
        guess = _learned_first_read(learned)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = [pool.submit(read_header, self.source, self.sha, p, first_read=guess) for p in rest]
            for future in as_completed(futures):
                result = future.result()
                results.append(result)
                if on_result:
                    on_result(result)
        order = {p: i for i, p in enumerate(paths)}
        return sorted(results, key=lambda r: order[r.path])


def _learned_first_read(first: HeaderResult | None) -> int:
    if first is None or first.header is None:
        return FIRST_READ
    h = first.header
    tensor_info = h.tensor_info_end - h.kv_end
    return h.kv_end + max(2 * tensor_info, TENSOR_INFO_SLACK)


__all__ = [
    "LOCAL_REVISION",
    "MANIFEST_PATH",
    "CommitInfo",
    "FetchStats",
    "HeaderFetcher",
    "HeaderResult",
    "HubError",
    "HubNotFound",
    "HubSource",
    "HubUnauthorized",
    "HubUnavailable",
    "InvalidRepoId",
    "LocalFolderSource",
    "PackageSource",
    "RemoteFile",
    "UrlSource",
    "catalog_package_repos",
    "list_namespace_packages",
    "parse_hf_uri",
    "read_header",
    "validate_repo_id",
]
