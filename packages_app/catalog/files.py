"""A revision's files: one page of them, the overview (layer files as ranges), one file, and its GGUF
metadata as display rows; each file with what the manifest says about it (audit provenance)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet

from packages_app import compiled
from packages_app.audit.model import FileCheck
from packages_app.catalog.errors import LookupFailed
from packages_app.layout import FileRole
from packages_app.models import PackageFile, Revision

TENSOR_ROW_LIMIT = 5000
FILES_PER_PAGE = 500
Checks: TypeAlias = Mapping[str, FileCheck]  # the manifest's check of each file, by path (audit provenance)
MISSING_ON_HUB = "missing_on_hub"  # capability.py's provenance status of a file the Hub did not list


@dataclass(frozen=True)
class FileRow:
    file: PackageFile
    manifest_size: int | None
    manifest_sha256: str
    status: str


@dataclass(frozen=True)
class FilePage:
    rows: list[FileRow]
    page: Page[PackageFile]


def revision_files(revision: Revision, page_number: int = 1, per_page: int = FILES_PER_PAGE) -> FilePage:
    """One page of the revision's files, each with what the manifest says about it (audit provenance).

    Files the manifest names but the Hub did not list are rows too, after the last page's Hub files.
    """
    paginator = Paginator(revision.files.defer("kv", "tensors").order_by("path"), per_page)
    page = paginator.get_page(page_number)
    checks = revision.audited.provenance.by_path()
    rows = [_file_row(f, checks.get(f.path)) for f in page.object_list]
    if not page.has_next():
        rows += _unlisted_rows(revision, checks)
    return FilePage(rows, page)


def _unlisted_rows(revision: Revision, checks: Checks) -> list[FileRow]:
    """Rows for the files the manifest names and the Hub did not list, by path."""
    unlisted = sorted((c for c in checks.values() if c.status == MISSING_ON_HUB), key=lambda c: c.path)
    return [_file_row(PackageFile(revision=revision, path=c.path, role=c.role), c) for c in unlisted]


@dataclass(frozen=True)
class FileRange:
    """Consecutive layer files with nothing to look at (sha256 as the manifest says, no header error).

    A split block's later parts carry no GGUF header: an unread header is not a finding, a failed one is."""

    first: str
    last: str
    count: int
    first_block: int | None
    last_block: int | None
    size: int
    header_bytes: int
    status: str  # the sha256 comparison every file of the range shares: "match", or "" (manifest names none)
    is_range: bool = True


@dataclass(frozen=True)
class FileOverview:
    """The files section by default: layer files as ranges, each file worth a look as its own row.

    ``items`` hold ``FileRange`` and ``FileRow`` in path order; ``more_other_files`` counts the files that
    are neither layers nor shown (a package with thousands of stray files lists them on the full pages).
    """

    items: list[FileRow | FileRange]
    total: int
    more_other_files: int


# The overview lists at most this many non-layer files by name, and reads at most this many layer files.
OVERVIEW_OTHER_FILES = 12
OVERVIEW_LAYER_FILES = 5000
_CLEAN_STATUSES = frozenset({"match", ""})
_OVERVIEW_FIELDS = (
    *("revision_id", "path", "role", "layer_index", "size", "lfs_sha256"),
    *("header_status", "header_bytes", "header_error"),
)


# A package of at most this many files (a 94-layer package has about 100) is read in one query; a bigger
# one reads its first layer files, its first other files and its count apart (three queries).
OVERVIEW_ONE_READ = 512


def revision_file_overview(revision: Revision, mtp_blocks: Iterable[int] = ()) -> FileOverview:
    """Layer files grouped into ranges, with mismatches, failed headers and MTP blocks kept as rows."""
    files = revision.files.only(*_OVERVIEW_FIELDS)
    checks = revision.audited.provenance.by_path()
    every: list[PackageFile] = compiled.instances(_first_files_of, revision.pk)
    for file in every:
        file.revision = revision  # as the related manager's read sets it
    if len(every) <= OVERVIEW_ONE_READ:
        layers = [f for f in every if f.role == FileRole.LAYER.value][:OVERVIEW_LAYER_FILES]
        others = [f for f in every if f.role != FileRole.LAYER.value][: OVERVIEW_OTHER_FILES + 1]
        total = len(every)
    else:
        layers = list(files.filter(role=FileRole.LAYER.value).order_by("path")[:OVERVIEW_LAYER_FILES])
        others = list(files.exclude(role=FileRole.LAYER.value).order_by("path")[: OVERVIEW_OTHER_FILES + 1])
        total = revision.files.count()
    rows = [_file_row(f, checks.get(f.path)) for f in others[:OVERVIEW_OTHER_FILES]]
    items: list[FileRow | FileRange] = [*rows, *_layer_items(layers, checks, frozenset(mtp_blocks))]
    items += _unlisted_rows(revision, checks)
    shown_others = min(len(others), OVERVIEW_OTHER_FILES)
    more = total - len(layers) - shown_others
    return FileOverview(items, total, max(more, 0))


def _first_files_of(revision_id: int) -> QuerySet[PackageFile]:
    """The revision's first OVERVIEW_ONE_READ + 1 files by path (compiled once per process:
    ``compiled.instances``)."""
    files = PackageFile.objects.filter(revision_id=revision_id).only(*_OVERVIEW_FIELDS)
    return files.order_by("path")[: OVERVIEW_ONE_READ + 1]


def _layer_items(
    layers: list[PackageFile], checks: Checks, mtp_blocks: frozenset[int]
) -> list[FileRow | FileRange]:
    items: list[FileRow | FileRange] = []
    run: list[PackageFile] = []
    for file in layers:
        row = _file_row(file, checks.get(file.path))
        if _unremarkable(row, mtp_blocks) and (not run or _status(run[-1], checks) == row.status):
            run.append(file)
            continue
        if _unremarkable(row, mtp_blocks):
            items.extend(_closed_run(run, checks))
            run = [file]
            continue
        items.extend(_closed_run(run, checks))
        run = []
        items.append(row)
    items.extend(_closed_run(run, checks))
    return items


def _unremarkable(row: FileRow, mtp_blocks: frozenset[int]) -> bool:
    file = row.file
    return (
        row.status in _CLEAN_STATUSES
        and file.header_status != PackageFile.HeaderStatus.FAILED
        and file.layer_index not in mtp_blocks
    )


def _status(file: PackageFile, checks: Checks) -> str:
    check = checks.get(file.path)
    return check.status if check else ""


def _closed_run(run: list[PackageFile], checks: Checks) -> list[FileRow | FileRange]:
    if len(run) < 3:
        return [_file_row(f, checks.get(f.path)) for f in run]
    return [
        FileRange(
            first=run[0].path,
            last=run[-1].path,
            count=len(run),
            first_block=run[0].layer_index,
            last_block=run[-1].layer_index,
            size=sum(f.size for f in run),
            header_bytes=sum(f.header_bytes or 0 for f in run),
            status=_status(run[0], checks),
        )
    ]


def _file_row(file: PackageFile, check: FileCheck | None) -> FileRow:
    if check is None:
        return FileRow(file=file, manifest_size=None, manifest_sha256="", status="")
    return FileRow(
        file=file,
        manifest_size=check.manifest_size,
        manifest_sha256=check.manifest_sha256 or "",
        status=check.status,
    )


def get_file(revision: Revision, path: str) -> PackageFile:
    file = revision.files.filter(path=path).first()
    if file is None:
        raise LookupFailed(f"{revision} has no file {path}.")
    return file


# --- GGUF metadata view --------------------------------------------------------------------------


@dataclass(frozen=True)
class KvRow:
    key: str
    kind: str
    summary: str
    full: str = ""


def kv_rows(kv: Any, text_limit: int = 240) -> list[KvRow]:
    """KV metadata as display rows: arrays summarised, long strings (chat templates) folded."""
    if not isinstance(kv, dict):
        return []
    return [_kv_row(str(key), value, text_limit) for key, value in sorted(kv.items())]


def _kv_row(key: str, value: Any, text_limit: int) -> KvRow:
    if isinstance(value, dict) and "array" in value:
        return KvRow(key, "array", f"{value.get('array')}[{value.get('count')}]")
    if isinstance(value, list):
        head = ", ".join(json.dumps(v) for v in value[:8])
        more = f", ... ({len(value)} items)" if len(value) > 8 else ""
        return KvRow(key, "array", f"[{head}{more}]")
    if isinstance(value, str):
        if len(value) > text_limit:
            return KvRow(key, "string", value[:text_limit] + "...", full=value)
        return KvRow(key, "string", value)
    kinds = {bool: "bool", int: "integer", float: "number"}
    return KvRow(key, kinds.get(type(value), "json"), json.dumps(value))
