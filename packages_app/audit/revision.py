"""Pure: one revision's audit, from manifest bytes + file listing + parsed headers; no Django, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from packages_app.audit.detection import (
    detect,
)
from packages_app.audit.fix import (
    _suggest,
)
from packages_app.audit.judgement import (
    _check_files,
    _coverage_problems,
    _header_error_problems,
    _judge,
    _layer_count_problems,
    _provenance,
    _source_path_problems,
    declare,
)
from packages_app.audit.model import (
    Audit,
    FileInfo,
)
from packages_app.audit.releases import compatibility
from packages_app.audit.runtime import resolve
from packages_app.manifest import (
    MANIFEST_FILE,
    Problem,
    Severity,
    parse_manifest,
)

_NO_ERRORS: Mapping[str, str] = MappingProxyType({})

# --- the audit --------------------------------------------------------------------------------


def audit(
    manifest_bytes: bytes | None,
    files: Sequence[FileInfo],
    headers: Mapping[str, Mapping[str, Any]],
    revision: str | None = None,
    header_errors: Mapping[str, str] = _NO_ERRORS,
) -> Audit:
    """Audit one revision: what the weights hold vs what model-package.json declares."""
    parsed = parse_manifest(manifest_bytes) if manifest_bytes is not None else None
    manifest = parsed.manifest if parsed else None
    problems = list(parsed.problems) if parsed else [_missing_manifest()]
    detected = detect(manifest, headers)
    declared = declare(manifest)
    coverage = _coverage_problems(detected, header_errors)
    problems += _header_error_problems(header_errors) + coverage + _layer_count_problems(manifest, detected)
    verdict, findings = _judge(manifest, detected, declared)
    problems += findings
    checks, file_problems = _check_files(manifest, files)
    problems += file_problems + _source_path_problems(manifest)
    trusted = parsed is not None and parsed.trusted
    if not trusted:
        verdict = "invalid-manifest"
    return Audit(
        verdict=verdict,
        detected=detected,
        declared=declared,
        problems=problems,
        provenance=_provenance(manifest, manifest_bytes, revision, checks),
        runtime=resolve(parsed, detected),
        suggested_generation=_suggest(verdict, manifest, detected) if trusted else None,
        auditable=not any(p.code == "weights_not_inspected" and p.severity == "error" for p in coverage),
        manifest=manifest,
        compatibility=tuple(compatibility(parsed, architecture=detected.architecture)),
    )


def _problem(code: str, severity: Severity, message: str, **evidence: Any) -> Problem:
    return Problem(code, severity, message, evidence)


def _missing_manifest() -> Problem:
    return _problem(
        "missing_manifest",
        "error",
        f"The revision has no {MANIFEST_FILE}, so nothing declares how to serve it.",
    )
