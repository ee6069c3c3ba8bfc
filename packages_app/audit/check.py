"""Pure: one model-package.json judged alone, as mesh-llm judges it: validity with mesh-llm's codes, the
canonical package_id, the resolver table and the release matrix. No weights, no network, no Django.

The shape of ``to_json`` is the contract of ``manage.py check_manifest --json``, the "Check a manifest" page
and ``POST /api/v1/check-manifest``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from packages_app.audit.assessment import Assessment
from packages_app.audit.headline import Facts, assess
from packages_app.audit.judgement import declare
from packages_app.audit.model import Runtime
from packages_app.audit.releases import Admission, compatibility
from packages_app.audit.runtime import resolve
from packages_app.manifest import ManifestResult, Problem, parse_manifest
from packages_app.verdicts import Status


@dataclass(frozen=True)
class ManifestCheck:
    schema: int | None
    parsed: ManifestResult
    declared_id: str | None
    computed_id: str | None
    runtime: Runtime
    compatibility: tuple[Admission, ...]
    assessment: Assessment
    sha256: str = ""  # of the bytes checked, to find a stored revision that holds the same manifest

    @property
    def valid(self) -> bool:
        return self.parsed.trusted

    @property
    def passes(self) -> bool:
        """Exit 0 of check_manifest: valid, admitted by the newest known release, not refused split by a
        known roster (the headline is not "not servable"), and no error finding."""
        newest = self.compatibility[-1] if self.compatibility else None
        errors = any(p.severity == "error" for p in self.problems)
        servable = newest is not None and newest.admitted is True
        refused = self.assessment.status in (Status.INVALID_MANIFEST, Status.NOT_SERVABLE)
        return self.valid and servable and not refused and not errors

    @property
    def problems(self) -> list[Problem]:
        return self.parsed.problems

    @property
    def id_matches(self) -> bool | None:
        if self.declared_id is None and self.computed_id is None:
            return None
        return self.declared_id == self.computed_id

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "valid": self.valid,
            "passes": self.passes,
            "assessment": self.assessment.to_json(),
            "problems": [
                {"code": p.code, "severity": p.severity, "message": p.message, "path": p.path}
                for p in self.problems
            ],
            "package_id": {
                "declared": self.declared_id,
                "computed": self.computed_id,
                "matches": self.id_matches,
            },
            "runtime": self.runtime.to_json(),
            "compatibility": [a.to_json() for a in self.compatibility],
        }


def check_manifest(data: bytes, source: str = "", architecture: str | None = None) -> ManifestCheck:
    """Judge manifest bytes; never raises on bad input. ``source`` is what ``audit_package`` would read
    to see the weights (a folder or owner/name), when the caller knows it; ``architecture`` is the
    metadata carrier's ``general.architecture`` when the caller could read it (a folder holding the
    carrier, or a tracked revision with the same bytes), which the split-certification gate needs."""
    parsed = parse_manifest(data)
    manifest = parsed.manifest
    raw = parsed.raw or {}
    schema = manifest.schema_version if manifest is not None else _int(raw.get("schema_version"))
    declared = raw.get("package_id") if schema != 1 else None
    runtime = resolve(parsed)
    admissions = tuple(compatibility(parsed, architecture=architecture))
    facts = Facts(parsed, runtime, admissions, declare(manifest), scope="manifest", source=source)
    return ManifestCheck(
        schema=schema,
        parsed=parsed,
        declared_id=declared if isinstance(declared, str) else None,
        computed_id=manifest.computed_package_id if manifest is not None else None,
        runtime=runtime,
        compatibility=admissions,
        assessment=assess(facts),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
