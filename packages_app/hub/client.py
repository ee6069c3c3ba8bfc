"""The Hub client: a package repo on a Hub-compatible server (``HF_ENDPOINT``) read through
huggingface_hub, plus the namespace and catalog listings discovery uses.

Everything is pinned to 40-hex commit shas. Every call runs inside ``net.bounded_call`` under the
source's ``Policy`` (origins, https, timeouts, deadlines, byte and page caps), and the per-revision caps
(files, header bytes, tensors per file) are refusals with a sentence saying which. Django's settings are
read lazily (and only when Django is configured); nothing else of Django is imported.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import build_hf_headers, paginate, parse_datetime  # type: ignore[attr-defined]

from packages_app.gguf_results import HeaderLimits
from packages_app.hub.errors import EXPECTED_ERRORS, HubError, HubRefused, InvalidRepoId, translate
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import DEFAULT_LIMITS, HUB_CDN_ORIGINS, Limits, Policy, bounded_call, ranged_get
from packages_app.hub.records import (
    MANIFEST_MAX_BYTES,
    MANIFEST_PATH,
    SHA_RE,
    CommitInfo,
    CuratedCatalogRow,
    FetchStats,
    ModelCard,
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


MAX_FILE_SIZE = 2**63 - 1  # a PackageFile.size column; no real file comes near


@dataclass(frozen=True)
class HubConfig:
    """The bounds of one source, from Django settings (or the defaults outside Django)."""

    limits: Limits = DEFAULT_LIMITS
    cdn_origins: tuple[str, ...] = HUB_CDN_ORIGINS
    development: bool = False
    max_files: int = 10_000
    max_commits: int = 50
    max_header_bytes: int = 1024**3
    max_tensors_per_file: int = 8192


def config_from_settings() -> HubConfig:
    try:
        from django.conf import settings

        get: Callable[[str, Any], Any] = lambda name, default: getattr(settings, name, default)  # noqa: E731
        get("HF_ENDPOINT", None)  # raises outside a configured Django
    except Exception:  # the pure CLI: defaults, and the development flag from the environment
        return HubConfig(development=os.environ.get("MESHDASH_HUB_DEV", "") in ("1", "true", "yes", "on"))
    base, limits = HubConfig(), Limits()
    return HubConfig(
        limits=Limits(
            connect_timeout=float(get("MESHDASH_HUB_CONNECT_TIMEOUT", limits.connect_timeout)),
            read_timeout=float(get("MESHDASH_HUB_READ_TIMEOUT", limits.read_timeout)),
            call_deadline=float(get("MESHDASH_HUB_CALL_DEADLINE", limits.call_deadline)),
            ingest_deadline=float(get("MESHDASH_HUB_INGEST_DEADLINE", limits.ingest_deadline)),
            max_retry_after=float(get("MESHDASH_HUB_MAX_RETRY_AFTER", limits.max_retry_after)),
            inline_retry_after=float(get("MESHDASH_HUB_INLINE_RETRY_AFTER", limits.inline_retry_after)),
            max_response_bytes=int(get("MESHDASH_HUB_MAX_RESPONSE_BYTES", limits.max_response_bytes)),
            max_pages=int(get("MESHDASH_HUB_MAX_PAGES", limits.max_pages)),
            max_listing_bytes=int(get("MESHDASH_HUB_MAX_LISTING_BYTES", limits.max_listing_bytes)),
        ),
        cdn_origins=tuple(get("MESHDASH_HUB_CDN_ORIGINS", None) or HUB_CDN_ORIGINS),
        development=bool(get("MESHDASH_HUB_DEV", False)),
        max_files=int(get("MESHDASH_MAX_FILES", base.max_files)),
        max_commits=int(get("MESHDASH_MAX_REVISIONS", base.max_commits)),
        max_header_bytes=int(get("MESHDASH_MAX_HEADER_BYTES", base.max_header_bytes)),
        max_tensors_per_file=int(get("MESHDASH_MAX_TENSORS_PER_FILE", base.max_tensors_per_file)),
    )


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
        config: HubConfig | None = None,
    ) -> None:
        self.repo_id = validate_repo_id(repo_id)
        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self.token = (token if token is not None else _token()) or None
        self.repo_type = repo_type
        self.max_retries = max_retries
        self.stats = stats or FetchStats()
        self.config = config or config_from_settings()
        self.policy = Policy.for_endpoint(
            self.endpoint,
            self.config.cdn_origins,
            development=self.config.development,
            limits=self.config.limits,
        )
        self.budget_deadline = time.monotonic() + self.config.limits.ingest_deadline
        self.header_limits = HeaderLimits(max_tensor_count=self.config.max_tensors_per_file)
        self.api = HfApi(endpoint=self.endpoint, token=self.token or False)
        self.label = f"hf://{repo_id}"
        self.private: bool | None = None  # what the Hub's repo info said, once resolve_revision ran
        # Whether the head holds model-package.json (None: the repo info did not list its files), and what
        # its model card says: both from the same repo info, once resolve_revision ran.
        self.holds_manifest: bool | None = None
        self.card: ModelCard | None = None

    def _bounded(self, what: str, *, listing: bool = False) -> Any:
        limits = self.config.limits
        return bounded_call(
            self.policy,
            what,
            budget_deadline=self.budget_deadline,
            max_requests=limits.max_pages if listing else None,
            max_bytes=limits.max_listing_bytes if listing else None,
        )

    def _call(self, what: str, fn: Callable[[], T], *, listing: bool = False) -> T:
        with self._bounded(what, listing=listing):
            try:
                return fn()
            except (
                EXPECTED_ERRORS
            ) as exc:  # huggingface_hub's errors, and httpx2's once its retries are spent
                raise translate(exc, what, max_retry_after=self.config.limits.max_retry_after) from exc

    def resolve_revision(self, revision: str | None) -> str:
        """A branch, tag or sha -> the 40-hex commit sha it points at now."""
        rev = revision or "main"
        what = f"{self.repo_id}@{rev}"
        info = self._call(
            what, lambda: self.api.repo_info(self.repo_id, revision=rev, repo_type=self.repo_type)
        )
        sha = getattr(info, "sha", None)
        private = getattr(info, "private", None)
        self.private = private if isinstance(private, bool) else None  # not said: stays unknown
        self.holds_manifest = _holds_manifest(info)
        self.card = model_card(info)
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            raise HubError(f"{what}: the Hub did not return a commit sha")
        return sha

    def list_commits(self, head: str | None = None) -> list[CommitInfo]:
        """The newest ``max_commits`` commits behind ``head`` (a pinned sha; default: the default branch).

        Read page by page and stopped at the cap: the pages past it are never requested.
        """
        limit = self.config.max_commits
        rev = quote(head or "main", safe="")
        url = f"{self.endpoint}/api/{self.repo_type}s/{self.repo_id}/commits/{rev}"
        headers = build_hf_headers(token=self.token or False)

        def fetch() -> list[Any]:
            return list(itertools.islice(paginate(url, params={}, headers=headers), limit))

        items = self._call(f"{self.repo_id} commits", fetch, listing=True)
        commits = (_commit_info(item) for item in items if isinstance(item, dict))
        return [c for c in commits if c is not None]

    def read_manifest(self, sha: str) -> bytes:
        return self.read_small_file(sha, MANIFEST_PATH, MANIFEST_MAX_BYTES)

    def read_small_file(self, sha: str, path: str, limit: int) -> bytes:
        """A whole small file, refused past ``limit`` bytes (read as a range so a huge one costs nothing)."""
        data = self.read_range(sha, path, 0, limit + 1)
        if len(data) > limit:
            raise HubError(f"{self.repo_id}@{sha[:12]}/{path} is larger than {limit} bytes")
        return data

    def list_files(self, sha: str) -> list[RemoteFile]:
        """Every file of the revision; refused past ``max_files`` or with a size no file can have."""
        what = f"{self.repo_id}@{sha[:12]} file list"
        cap = self.config.max_files

        def fetch() -> list[RemoteFile]:
            entries = self.api.list_repo_tree(
                self.repo_id, revision=sha, recursive=True, repo_type=self.repo_type
            )
            files = (_remote_file(e, what) for e in entries if isinstance(e, RepoFile))
            return list(itertools.islice(files, cap + 1))

        files = self._call(what, fetch, listing=True)
        if len(files) > cap:
            raise HubRefused(
                f"{what}: more than {cap} files; meshdash reads at most {cap} (MESHDASH_MAX_FILES)"
            )
        return sorted(files, key=lambda f: f.path)

    def url(self, sha: str, path: str) -> str:
        return hf_hub_url(self.repo_id, path, revision=sha, repo_type=self.repo_type, endpoint=self.endpoint)

    def read_range(self, sha: str, path: str, start: int, length: int) -> bytes:
        """Bytes [start, start+length) of a file at a commit, or fewer at the end of the file."""
        headers = build_hf_headers(token=self.token or False)
        what = f"{self.repo_id}@{sha[:12]}/{path}"
        cap = self.config.max_header_bytes
        if self.stats.bytes >= cap:
            raise HubRefused(
                f"{what}: this revision's ranged reads passed {cap} bytes (MESHDASH_MAX_HEADER_BYTES)"
            )
        with self._bounded(what):
            data = ranged_get(
                self.url(sha, path), start, length, headers=headers, what=what, max_retries=self.max_retries
            )
        self.stats.add(len(data))
        return data


def _remote_file(entry: RepoFile, what: str) -> RemoteFile:
    lfs = entry.lfs
    sha256 = lfs.sha256 if lfs is not None else None
    size = entry.size
    if not isinstance(size, int) or not 0 <= size <= MAX_FILE_SIZE:
        raise HubRefused(f"{what}: {entry.path!r} claims a size of {str(size)[:40]} bytes, which no file has")
    return RemoteFile(path=entry.path, size=size, lfs_sha256=sha256, blob_id=entry.blob_id or "")


def _commit_info(item: dict[str, Any]) -> CommitInfo | None:
    sha, title, date = item.get("id"), item.get("title"), item.get("date")
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        return None
    return CommitInfo(sha=sha, date=_date(date), title=(title if isinstance(title, str) else "")[:500])


def _date(value: object) -> datetime | None:
    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None


SkipFn = Callable[[str, str], None]
MAX_MANIFEST_PROBES = 200  # repos of a namespace whose listing does not say which files they hold
_CARD_LIMIT = 64  # tags or base models kept from a card, each at most 200 characters


def _sibling_names(info: object) -> set[str] | None:
    """The file names a model listing or repo info names (None when it does not list them)."""
    siblings = getattr(info, "siblings", None)
    if not isinstance(siblings, list):
        return None
    return {s.rfilename for s in siblings if isinstance(getattr(s, "rfilename", None), str)}


def _holds_manifest(info: object) -> bool | None:
    names = _sibling_names(info)
    return None if names is None else MANIFEST_PATH in names


def _short_texts(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(v[:200] for v in items[:_CARD_LIMIT] if isinstance(v, str) and v)


def model_card(info: object) -> ModelCard:
    """The card facts of a repo info: ``base_model`` (a string or a list on the Hub), tags, library_name."""
    data = getattr(info, "card_data", None)
    base = getattr(data, "base_model", None) if data is not None else None
    library = getattr(data, "library_name", None) if data is not None else None
    tags = _short_texts(getattr(info, "tags", None)) or _short_texts(getattr(data, "tags", None))
    return ModelCard(_short_texts(base), tags, library[:100] if isinstance(library, str) else "")


def _ignore(repo_id: str, reason: str) -> None:
    pass


def _valid_ids(candidates: Iterable[str], on_skip: SkipFn) -> Iterator[str]:
    """The candidates that are valid repo ids; each other one reported with the reason, and skipped."""
    for repo_id in candidates:
        try:
            yield validate_repo_id(repo_id)
        except InvalidRepoId as exc:
            on_skip(repo_id[:200], str(exc))


def list_namespace_packages(
    namespace: str, *, endpoint: str | None = None, on_skip: SkipFn = _ignore
) -> list[str]:
    """The packages of ``namespace``: its model repos that hold model-package.json; invalid ids skipped."""
    return sorted(namespace_packages(namespace, endpoint=endpoint, on_skip=on_skip))


def namespace_packages(
    namespace: str, *, endpoint: str | None = None, on_skip: SkipFn = _ignore
) -> dict[str, bool | None]:
    """The model repos of ``namespace`` that hold ``model-package.json`` at their head, each with what the
    listing says of its privacy (None when it does not say); invalid ids skipped.

    mesh-llm finds a package by its manifest, whatever the repo is called ("Repo naming is intentionally
    ignored", docs/rules.md section 6b), so the listing asks for each repo's files (``full``) instead of
    searching names. A repo the listing lists without files is asked for its own repo info (at most
    MAX_MANIFEST_PROBES a namespace; those past it are reported to ``on_skip``, never dropped silently).
    """
    endpoint = endpoint or default_endpoint()
    config = config_from_settings()
    policy = Policy.for_endpoint(
        endpoint, config.cdn_origins, development=config.development, limits=config.limits
    )
    api = HfApi(endpoint=endpoint, token=_token() or False)
    what = f"models of {namespace}"
    limits = config.limits
    with bounded_call(policy, what, max_requests=limits.max_pages, max_bytes=limits.max_listing_bytes):
        try:
            models = list(api.list_models(author=namespace, full=True))
        except EXPECTED_ERRORS as exc:
            raise translate(exc, what, max_retry_after=limits.max_retry_after) from exc
    listed = {m.id: m for m in models if isinstance(getattr(m, "id", None), str)}
    valid = list(_valid_ids(list(listed), on_skip))
    found: dict[str, bool | None] = {}
    unlisted: list[str] = []
    for repo_id in valid:
        holds = _holds_manifest(listed[repo_id])
        if holds is None:
            unlisted.append(repo_id)
        elif holds:
            private = getattr(listed[repo_id], "private", None)
            found[repo_id] = private if isinstance(private, bool) else None
    for repo_id in unlisted[MAX_MANIFEST_PROBES:]:
        on_skip(
            repo_id,
            f"the listing does not say whether it holds {MANIFEST_PATH}, and past "
            f"{MAX_MANIFEST_PROBES} repos meshdash does not ask each one",
        )
    for repo_id in unlisted[:MAX_MANIFEST_PROBES]:
        found |= _probe_manifest(api, policy, config, repo_id, on_skip)
    return found


def _probe_manifest(
    api: HfApi, policy: Policy, config: HubConfig, repo_id: str, on_skip: SkipFn
) -> dict[str, bool | None]:
    """One repo's own info (as mesh-llm's probe, hf_model_repo_has_file): {repo: privacy} when its head
    holds model-package.json, {} when not; a Hub error is reported and skipped, not fatal."""
    what = f"{repo_id} files"
    limits = config.limits
    try:
        with bounded_call(policy, what, max_requests=limits.max_pages, max_bytes=limits.max_listing_bytes):
            try:
                info = api.model_info(repo_id)
            except EXPECTED_ERRORS as exc:
                raise translate(exc, what, max_retry_after=limits.max_retry_after) from exc
    except HubError as exc:
        on_skip(repo_id, f"could not read which files it holds: {str(exc)[:200]}")
        return {}
    if not _holds_manifest(info):
        return {}
    private = getattr(info, "private", None)
    return {repo_id: private if isinstance(private, bool) else None}


def catalog_package_repos(
    dataset_id: str, *, endpoint: str | None = None, on_skip: SkipFn = _ignore
) -> list[str]:
    """Package repos listed by the curated ``meshllm/catalog`` dataset (``entries/<owner>/<repo>.json``)."""
    return sorted({row.repo for row in catalog_package_rows(dataset_id, endpoint=endpoint, on_skip=on_skip)})


def catalog_package_rows(
    dataset_id: str, *, endpoint: str | None = None, on_skip: SkipFn = _ignore
) -> list[CuratedCatalogRow]:
    """Every package row of the curated catalog dataset, with its entry, variant and source model."""
    source = HubSource(dataset_id, endpoint=endpoint, repo_type="dataset")
    sha = source.resolve_revision(None)
    rows: list[CuratedCatalogRow] = []
    for f in source.list_files(sha):
        if not (f.path.startswith("entries/") and f.path.endswith(".json")) or f.size > 1024 * 1024:
            continue
        try:
            entry = json.loads(source.read_small_file(sha, f.path, 1024 * 1024))
        except (ValueError, RecursionError, HubError):
            on_skip(f.path, "the catalog entry is not readable JSON")
            continue
        rows += _valid_rows(catalog_entry_rows(f.path, entry), on_skip)
    return rows


def _valid_rows(rows: Iterable[CuratedCatalogRow], on_skip: SkipFn) -> Iterator[CuratedCatalogRow]:
    for row in rows:
        if list(_valid_ids([row.repo], on_skip)):
            yield row


def catalog_entry_rows(path: str, entry: object) -> Iterator[CuratedCatalogRow]:
    """The layer-package rows of one catalog entry. ``variants`` is an object keyed by variant or an array
    of variants (mesh-llm reads both; an array item names itself under ``name``); a row's ``source_revision``
    is the source model's revision, falling back to the variant's ``source.revision``."""
    variants = entry.get("variants") if isinstance(entry, dict) else None
    if isinstance(variants, dict):
        named = list(variants.items())
    elif isinstance(variants, list):
        named = [
            (str(v.get("name") or i) if isinstance(v, dict) else str(i), v) for i, v in enumerate(variants)
        ]
    else:
        named = []
    for name, variant in named[:1000]:
        if isinstance(variant, dict):
            yield from _variant_rows(path, name[:200], variant)


def _variant_rows(path: str, name: str, variant: dict[str, Any]) -> Iterator[CuratedCatalogRow]:
    found = variant.get("source")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    packages = variant.get("packages")
    for pkg in packages[:1000] if isinstance(packages, list) else ():
        repo = pkg.get("repo") if isinstance(pkg, dict) else None
        if not isinstance(repo, str) or pkg.get("type", "layer-package") != "layer-package":
            continue
        revision = pkg.get("source_revision") or source.get("revision")
        count = pkg.get("layer_count")
        yield CuratedCatalogRow(
            repo=repo,
            entry=path,
            variant=name,
            source_repo=_text(source.get("repo"), 96),
            source_revision=_text(revision, 64),
            layer_count=count
            if isinstance(count, int) and not isinstance(count, bool) and count > 0
            else None,
        )


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""
