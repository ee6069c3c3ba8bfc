"""The diff of two revisions: the manifest as a unified diff (capped), and the files added, removed and
changed."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from packages_app.models import PackageFile, Revision

DIFF_LINE_LIMIT = 4000
# difflib is quadratic in the worst case; real manifests are under 2,000 pretty-printed lines.
DIFF_INPUT_LIMIT = 6000


@dataclass
class RevisionDiff:
    old: Revision
    new: Revision
    manifest_diff: list[str] = field(default_factory=list)
    truncated: bool = False
    too_large: bool = False
    added: list[PackageFile] = field(default_factory=list)
    removed: list[PackageFile] = field(default_factory=list)
    changed: list[tuple[PackageFile, PackageFile]] = field(default_factory=list)

    @property
    def verdict_changed(self) -> bool:
        return self.old.verdict != self.new.verdict

    @property
    def sides(self) -> tuple[Revision, Revision]:
        return self.old, self.new


def revision_diff(old: Revision, new: Revision) -> RevisionDiff:
    """Manifest changes as a unified diff, plus files added, removed and changed (size or sha256)."""
    old_lines, new_lines = _manifest_lines(old.manifest_json), _manifest_lines(new.manifest_json)
    too_large = max(len(old_lines), len(new_lines)) > DIFF_INPUT_LIMIT
    lines = [] if too_large else manifest_unified_diff(old, new)
    diff = RevisionDiff(old, new, lines[:DIFF_LINE_LIMIT], len(lines) > DIFF_LINE_LIMIT, too_large)
    old_files = _files_by_path(old)
    new_files = _files_by_path(new)
    diff.added = [new_files[p] for p in sorted(new_files.keys() - old_files.keys())]
    diff.removed = [old_files[p] for p in sorted(old_files.keys() - new_files.keys())]
    for path in sorted(old_files.keys() & new_files.keys()):
        a, b = old_files[path], new_files[path]
        if (a.size, a.lfs_sha256) != (b.size, b.lfs_sha256):
            diff.changed.append((a, b))
    return diff


def _files_by_path(revision: Revision) -> dict[str, PackageFile]:
    files = revision.files.only("revision_id", "path", "role", "size", "lfs_sha256")
    return {f.path: f for f in files}


def manifest_unified_diff(old: Revision, new: Revision) -> list[str]:
    # Pretty-printed with sorted keys so the diff shows meaning, not key order or minified lines.
    return list(
        difflib.unified_diff(
            _manifest_lines(old.manifest_json),
            _manifest_lines(new.manifest_json),
            fromfile=f"model-package.json@{old.short_sha}",
            tofile=f"model-package.json@{new.short_sha}",
            lineterm="",
        )
    )


def _manifest_lines(manifest: Any) -> list[str]:
    if manifest is None:
        return []
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
