"""Pure: schema 2 (package-v2) judged as mesh-llm judges it: serde decoding (v2schema), then
``validate_root`` (v2rules), then the typed Manifest (typed). No Django, no I/O."""

from __future__ import annotations

from packages_app.layout import MANIFEST_FILE
from packages_app.manifest.identity import canonical_package_id
from packages_app.manifest.model import Json, Manifest, Problem
from packages_app.manifest.reader import safe_text
from packages_app.manifest.typed import typed_v2
from packages_app.manifest.v2rules import validate_root
from packages_app.manifest.v2schema import DecodeError, decode_root


def parse_v2(raw: Json) -> tuple[Manifest | None, list[Problem]]:
    try:
        root = decode_root(raw)
    except DecodeError as exc:
        return None, [parse_error(exc, "package-v2")]
    computed = canonical_package_id(root)
    problems = [
        Problem(
            i.code, "error", safe_text(f"{MANIFEST_FILE} {i.path}: {i.message}."), {"path": safe_text(i.path)}
        )
        for i in validate_root(root, computed)
    ]
    return typed_v2(root, raw, computed), problems


def parse_error(exc: DecodeError, schema: str) -> Problem:
    where = f" at {exc.path}" if exc.path else ""
    message = f"{MANIFEST_FILE} does not parse as a {schema} manifest{where}: {exc.message}."
    path = safe_text(exc.path or MANIFEST_FILE)
    return Problem("invalid_manifest_json", "error", safe_text(message), {"path": path})
