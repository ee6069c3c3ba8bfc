"""Pure: one revision's audit, from manifest bytes + file listing + parsed headers; no Django, no I/O.

``Audit`` lives here rather than with the other result types (model.py) because it carries the
assessment, which assessment.py builds from those types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from packages_app.audit import readback as rb
from packages_app.audit.assessment import Assessment, Scope
from packages_app.audit.detection import (
    detect,
)
from packages_app.audit.fix import (
    suggest,
)
from packages_app.audit.headline import Facts, assess
from packages_app.audit.judgement import (
    check_files,
    coverage_problems,
    declare,
    header_error_problems,
    judge,
    layer_count_problems,
    provenance_of,
    source_path_problems,
)
from packages_app.audit.model import (
    Declared,
    Detected,
    FileInfo,
    Provenance,
    Runtime,
    Suggestion,
    verdict_is_consistent,
)
from packages_app.audit.releases import Admission, compatibility
from packages_app.audit.request_defaults import RequestDefaults, request_defaults
from packages_app.audit.runtime import resolve
from packages_app.manifest import (
    MANIFEST_FILE,
    SEVERITIES,
    Json,
    Manifest,
    Problem,
    Severity,
    parse_manifest,
)
from packages_app.verdicts import Verdict, verdict_of

_NO_ERRORS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Audit:
    verdict: Verdict
    detected: Detected
    declared: Declared
    problems: list[Problem]
    provenance: Provenance
    runtime: Runtime
    suggested_generation: Suggestion | None
    # False when the headers needed to judge MTP were not read: `audit_package` exits 2 then.
    auditable: bool = True
    manifest: Manifest | None = None
    compatibility: tuple[Admission, ...] = ()
    assessment: Assessment | None = None  # always set by audit(); stored apart from to_json's document
    request_defaults: RequestDefaults | None = None  # what generation.request_defaults sets (mesh-llm #1876)

    @property
    def consistent(self) -> bool:
        return verdict_is_consistent(self.verdict)

    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def to_json(self) -> Json:
        return {
            "verdict": self.verdict.value,
            "detected": self.detected.to_json(),
            "declared": self.declared.to_json(),
            "problems": [p.to_json() for p in self.problems],
            "provenance": self.provenance.to_json(),
            "runtime": self.runtime.to_json(),
            "suggested_generation": self.suggested_generation.to_json()
            if self.suggested_generation
            else None,
            "compatibility": [a.to_json() for a in self.compatibility],
            "request_defaults": self.request_defaults.to_json() if self.request_defaults else None,
        }


@dataclass(frozen=True)
class Cut:
    """What ingest cut from a stored audit (ingest.cap_audit): a list kept to its first ``kept`` items, or
    a text of ``total`` characters dropped whole (``kept`` 0)."""

    path: str
    kept: int
    total: int

    @classmethod
    def from_json(cls, doc: Any) -> Cut | None:
        d = rb.mapping(doc)
        path, kept, total = (
            rb.optional_text(d.get("path")),
            rb.integer(d.get("kept")),
            rb.integer(d.get("total")),
        )
        return cls(path, kept, total) if path is not None and kept is not None and total is not None else None


@dataclass(frozen=True)
class StoredAudit:
    """A revision's audit as the database holds it (``Audit.to_json``, capped by ingest), read back typed:
    the one place that knows the stored document's keys (``Revision.audited``). A revision never audited,
    or an audit from an older version, reads as empty values, never as an error."""

    present: bool = False  # False: the revision was never audited (or its audit is not a JSON object)
    verdict: Verdict | None = None
    detected: Detected = field(default_factory=Detected)
    declared: Declared = field(default_factory=Declared)
    problems: tuple[Problem, ...] = ()
    provenance: Provenance = field(default_factory=lambda: Provenance(None, None, None, False, ()))
    runtime: Runtime = field(default_factory=lambda: Runtime(()))
    suggestion: Suggestion | None = None
    request_defaults: RequestDefaults | None = None
    # Each release's admission as stored ({"release", "admitted", "why", ...}), which the API passes on.
    compatibility: tuple[Mapping[str, Any], ...] = ()
    truncated: tuple[Cut, ...] = ()

    @classmethod
    def from_json(cls, doc: Any) -> StoredAudit:
        d = rb.mapping(doc)
        return cls(
            present=isinstance(doc, Mapping),
            runtime=Runtime.from_json(d.get("runtime")),
            verdict=verdict_of(rb.optional_text(d.get("verdict"))),
            detected=Detected.from_json(d.get("detected")),
            declared=Declared.from_json(d.get("declared")),
            problems=rb.each(d.get("problems"), Problem.from_json),
            provenance=Provenance.from_json(d.get("provenance")),
            suggestion=Suggestion.from_json(d.get("suggested_generation")),
            request_defaults=RequestDefaults.from_json(d.get("request_defaults")),
            compatibility=rb.each(d.get("compatibility"), _admission_row),
            truncated=rb.each(d.get("truncated"), Cut.from_json),
        )

    def to_json(self) -> Json:
        """The stored sections as the API shows them (``null`` where the revision was never audited)."""
        if not self.present:
            return dict.fromkeys(STORED_SECTIONS) | {"problems": [], "compatibility": []}
        return {
            "detected": self.detected.to_json(),
            "declared": self.declared.to_json(),
            "problems": [p.to_json() for p in self.problems],
            "provenance": self.provenance.to_json(),
            "runtime": self.runtime.to_json(),
            "compatibility": [dict(row) for row in self.compatibility],
            "suggested_generation": self.suggestion.to_json() if self.suggestion else None,
            "request_defaults": self.request_defaults.to_json() if self.request_defaults else None,
        }

    def problems_by_severity(self) -> list[Problem]:
        """Errors first, then warnings, then notes; each severity in the audit's order."""
        return sorted(self.problems, key=lambda p: SEVERITIES.index(p.severity))

    def was_cut(self, path: str) -> bool:
        return any(c.path == path for c in self.truncated)


STORED_SECTIONS = (
    *("detected", "declared", "problems", "provenance", "runtime"),
    *("compatibility", "suggested_generation", "request_defaults"),
)


def _admission_row(doc: Any) -> Mapping[str, Any] | None:
    row = rb.mapping(doc)
    return row if {"release", "admitted", "why"} <= row.keys() else None


# --- the audit --------------------------------------------------------------------------------


def audit(
    manifest_bytes: bytes | None,
    files: Sequence[FileInfo],
    headers: Mapping[str, Mapping[str, Any]],
    revision: str | None = None,
    header_errors: Mapping[str, str] = _NO_ERRORS,
    scope: Scope = "revision",
    source: str = "",
) -> Audit:
    """Audit one revision: what the weights hold vs what model-package.json declares."""
    parsed = parse_manifest(manifest_bytes) if manifest_bytes is not None else None
    manifest = parsed.manifest if parsed else None
    problems = list(parsed.problems) if parsed else [_missing_manifest()]
    detected = detect(manifest, headers)
    declared = declare(manifest)
    coverage = coverage_problems(detected, header_errors)
    problems += header_error_problems(header_errors) + coverage + layer_count_problems(manifest, detected)
    verdict, findings = judge(manifest, detected, declared)
    problems += findings
    checks, file_problems = check_files(manifest, files)
    problems += file_problems + source_path_problems(manifest)
    trusted = parsed is not None and parsed.trusted
    if not trusted:
        verdict = Verdict.INVALID_MANIFEST
    runtime = resolve(parsed, detected)
    admissions = tuple(compatibility(parsed, architecture=detected.architecture))
    suggestion = suggest(verdict, manifest, detected) if trusted else None
    auditable = not any(p.code == "weights_not_inspected" and p.severity == "error" for p in coverage)
    facts = Facts(
        parsed=parsed,
        runtime=runtime,
        compatibility=admissions,
        declared=declared,
        verdict=verdict if auditable or not trusted else None,
        detected=detected,
        suggestion=suggestion,
        problems=problems,
        scope=scope,
        source=source,
    )
    return Audit(
        verdict=verdict,
        detected=detected,
        declared=declared,
        problems=problems,
        provenance=provenance_of(manifest, manifest_bytes, revision, checks),
        runtime=runtime,
        suggested_generation=suggestion,
        auditable=auditable,
        manifest=manifest,
        compatibility=admissions,
        assessment=assess(facts),
        request_defaults=request_defaults(manifest) if trusted else None,
    )


def problem(code: str, severity: Severity, message: str, **evidence: Any) -> Problem:
    return Problem(code, severity, message, evidence)


def _missing_manifest() -> Problem:
    return problem(
        "missing_manifest",
        "error",
        f"The revision has no {MANIFEST_FILE}, so nothing declares how to serve it.",
    )
