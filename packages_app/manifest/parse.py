"""Pure: model-package.json bytes -> ManifestResult (dispatch on schema_version) and stable rendering."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from packages_app.manifest.jsonload import _load_json, _Rejected, _rejected
from packages_app.manifest.model import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    ManifestResult,
)
from packages_app.manifest.reader import (
    _is_int,
    _json_type,
    _Report,
    _show,
)
from packages_app.manifest.v1 import _parse_v1
from packages_app.manifest.v2 import _parse_v2

# --- public entry points ----------------------------------------------------------------------


def parse_manifest(data: bytes) -> ManifestResult:
    """Parse model-package.json bytes; never raises on bad input, every defect becomes a Problem."""
    if len(data) > MAX_MANIFEST_BYTES:
        return _rejected(
            "manifest_too_large",
            f"{MANIFEST_FILE} is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit; not parsed.",
            size=len(data),
        )
    try:
        raw, duplicates = _load_json(data)
    except _Rejected as exc:
        return _rejected(exc.code, exc.message)
    if not isinstance(raw, dict):
        return _rejected("invalid_type", f"{MANIFEST_FILE} must hold a JSON object, not {_json_type(raw)}.")
    report = _Report()
    for key in duplicates:
        report.add(
            "duplicate_key", f"{MANIFEST_FILE} repeats the key {_show(key)} inside one object.", key=key
        )
    version = raw.get("schema_version")
    if version is None or not _is_int(version) or version not in (1, 2):
        code = "missing_key" if version is None else "unsupported_schema_version"
        report.add(code, f"{MANIFEST_FILE} schema_version is {_show(version)}; only 1 and 2 are understood.")
        return ManifestResult(None, report.finish())
    manifest = _parse_v1(report, raw) if version == 1 else _parse_v2(report, raw)
    return ManifestResult(manifest, report.finish())


def render_manifest(raw: Mapping[str, Any]) -> str:
    """Stable pretty JSON (2-space indent, key order kept, trailing newline), as a writer emits it."""
    text = json.dumps(raw, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from \\ud800 escapes survive only as escapes
        text = json.dumps(raw, indent=2)
    return text + "\n"
