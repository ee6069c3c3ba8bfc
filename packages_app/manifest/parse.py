"""Pure: model-package.json bytes -> ManifestResult (dispatch on schema_version) and stable rendering."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from packages_app.layout import MANIFEST_FILE, MAX_MANIFEST_BYTES
from packages_app.manifest.findings import extra_findings
from packages_app.manifest.jsonload import Rejected, load_json_strict
from packages_app.manifest.model import (
    MAX_PROBLEMS,
    ManifestResult,
    Problem,
)
from packages_app.manifest.reader import is_int, json_type, show
from packages_app.manifest.v1 import parse_v1
from packages_app.manifest.v2 import parse_v2

# --- public entry points ----------------------------------------------------------------------


def parse_manifest(data: bytes) -> ManifestResult:
    """Judge model-package.json bytes as mesh-llm does; never raises, every defect becomes a Problem.

    Schema 1 goes to the v1 preflight; anything else is read as package-v2 (whose validator reports
    unsupported_schema_version), as the runtime does.
    """
    if len(data) > MAX_MANIFEST_BYTES:
        return _rejected(
            "manifest_too_large",
            f"{MANIFEST_FILE} is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit; not parsed.",
            size=len(data),
        )
    try:
        raw, duplicates = load_json_strict(data)
    except Rejected as exc:
        return _rejected(exc.code, exc.message)
    if not isinstance(raw, dict):
        return _rejected(
            "invalid_manifest_json", f"{MANIFEST_FILE} must hold a JSON object, not {json_type(raw)}."
        )
    # serde refuses a repeated struct field ("duplicate field"), so a repeated key is a parse error.
    problems = [
        Problem(
            "duplicate_key",
            "error",
            f"{MANIFEST_FILE} repeats the key {show(key)} inside one object.",
            {"key": key},
        )
        for key in duplicates
    ]
    version = raw.get("schema_version")
    manifest, found = parse_v1(raw) if is_int(version) and version == 1 else parse_v2(raw)
    problems += found[:MAX_PROBLEMS]
    if len(found) > MAX_PROBLEMS:
        problems.append(_more(len(found) - MAX_PROBLEMS))
    if manifest is not None:
        problems += extra_findings(manifest)
    return ManifestResult(manifest, problems, raw)


def _rejected(code: str, message: str, **evidence: Any) -> ManifestResult:
    return ManifestResult(None, [Problem(code, "error", message, evidence)])


def _more(count: int) -> Problem:
    message = f"{MANIFEST_FILE} has {count} more problems that are not listed."
    return Problem("too_many_problems", "error", message, {"not_listed": count})


def render_manifest(raw: Mapping[str, Any]) -> str:
    """Stable pretty JSON (2-space indent, key order kept, trailing newline), as a writer emits it."""
    text = json.dumps(raw, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from \\ud800 escapes survive only as escapes
        text = json.dumps(raw, indent=2)
    return text + "\n"
