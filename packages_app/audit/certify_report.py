"""Pure: mesh-llm's own "did this package load and answer" report, as ``mesh-llm models certify`` writes it
(docs/rules.md section 6b: ``SkippyCertificationReport``, schema_version 1,
``Mesh-LLM/mesh-llm@9c59b979:skippy/crates/skippy-api/src/package/certification.rs``), read into a typed
value. No Django, no I/O.

The report names the package bytes it tested by ``manifest_sha256`` (the sha256 of its model-package.json), so
meshdash ties it to the revision holding those bytes. Its gates are ``package_materialization`` and the
runtime smoke gates (``v1_models``, ``v1_chat_completions``, ``v1_responses``), each passed, failed,
incomplete or not_required; the overall status is failed when any gate failed, else incomplete when any is,
else passed, as ``aggregate_certification_status`` computes it. It does not cover split certification.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from packages_app import input_budget
from packages_app.input_budget import InputBudget, OverBudget

SCHEMA_VERSION = 1
STATUSES = ("passed", "failed", "incomplete", "not_required")
MAX_REPORT_BYTES = 1024 * 1024
MAX_GATES = 32
MAX_STAGES = 64
MAX_TEXT = 2000
# The input budget every parser of untrusted input shares (a real report nests 5 deep).
BUDGET = InputBudget.for_bytes("The report", MAX_REPORT_BYTES, 16)
_HEX64 = re.compile(r"[0-9a-f]{64}")


class CertifyReportError(ValueError):
    """A report meshdash cannot take; the message names the field and what is wrong."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Gate:
    name: str
    status: str
    details: str = ""


@dataclass(frozen=True)
class CertifyReport:
    status: str
    manifest_sha256: str
    model_id: str
    resolved_package_ref: str
    input: str
    layer_count: int
    package_gate: Gate
    runtime_gates: tuple[Gate, ...]
    stages: int  # materialized_stages tested
    digest: str  # sha256 of the report's canonical JSON: the same report is stored once

    @property
    def gates(self) -> tuple[Gate, ...]:
        return (self.package_gate, *self.runtime_gates)

    @property
    def failed_gate(self) -> str:
        """The first gate that failed ("" when none did)."""
        return next((g.name for g in self.gates if g.status == "failed"), "")

    def summary(self) -> str:
        """ "passed", "failed at v1_chat_completions", "incomplete (v1_responses)", "not required"."""
        if self.status == "failed":
            return f"failed at {self.failed_gate or 'an unnamed gate'}"
        if self.status == "incomplete":
            waiting = [g.name for g in self.gates if g.status == "incomplete"]
            return f"incomplete ({', '.join(waiting)})" if waiting else "incomplete"
        return "not required" if self.status == "not_required" else "passed"


def parse_certify_report(data: bytes | Any) -> CertifyReport:
    """A report from its JSON bytes (or the parsed JSON); raises CertifyReportError naming what is wrong."""
    doc = _document(data)
    if doc.get("schema_version") != SCHEMA_VERSION or type(doc.get("schema_version")) is not int:
        found = str(doc.get("schema_version"))[:20]
        raise CertifyReportError(
            f"schema_version is {found}; only schema {SCHEMA_VERSION} is known", "schema_version"
        )
    package_gate = _gate(doc.get("package_gate"), "package_gate")
    runtime_gates = tuple(
        _gate(g, f"runtime_gates.{i}") for i, g in enumerate(_list(doc, "runtime_gates", MAX_GATES))
    )
    stages = _list(doc, "materialized_stages", MAX_STAGES)
    status = _status(doc.get("status"), "status")
    expected = aggregate_status([package_gate.status, *(g.status for g in runtime_gates)])
    if status != expected:
        raise CertifyReportError(
            f"status is {status}, but its gates make it {expected} (mesh-llm's aggregate): edited by hand?",
            "status",
        )
    return CertifyReport(
        status=status,
        manifest_sha256=_digest(doc.get("manifest_sha256")),
        model_id=_text(doc, "model_id"),
        resolved_package_ref=_text(doc, "resolved_package_ref"),
        input=_text(doc, "input"),
        layer_count=_count(doc.get("layer_count")),
        package_gate=package_gate,
        runtime_gates=runtime_gates,
        stages=len(stages),
        digest=hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest(),
    )


def aggregate_status(statuses: list[str]) -> str:
    """mesh-llm's ``aggregate_certification_status``: failed wins, then incomplete, else passed."""
    if "failed" in statuses:
        return "failed"
    return "incomplete" if "incomplete" in statuses else "passed"


def _document(data: bytes | Any) -> dict[str, Any]:
    if isinstance(data, bytes | bytearray):
        try:
            data = input_budget.load_json(bytes(data), BUDGET)
        except OverBudget as exc:
            raise CertifyReportError(exc.message.rstrip(".")) from None
        except ValueError:
            raise CertifyReportError("the report is not JSON") from None
    if not isinstance(data, dict):
        raise CertifyReportError(f"the report must be a JSON object, not {type(data).__name__}")
    return data


def _status(value: Any, field: str) -> str:
    if value not in STATUSES:
        raise CertifyReportError(
            f"{field} is {str(value)[:40]!r}; it must be one of {', '.join(STATUSES)}", field
        )
    return str(value)


def _gate(value: Any, field: str) -> Gate:
    if not isinstance(value, dict):
        raise CertifyReportError(f"{field} must be an object {{name, status, details?}}", field)
    name = value.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise CertifyReportError(f"{field}.name must be a gate name (1-100 characters)", f"{field}.name")
    details = value.get("details")
    if details is not None and not isinstance(details, str):
        raise CertifyReportError(f"{field}.details must be a string", f"{field}.details")
    return Gate(name, _status(value.get("status"), f"{field}.status"), (details or "")[:MAX_TEXT])


def _list(doc: dict[str, Any], field: str, limit: int) -> list[Any]:
    value = doc.get(field)
    if not isinstance(value, list):
        raise CertifyReportError(f"{field} must be a list", field)
    if len(value) > limit:
        raise CertifyReportError(f"{field} lists {len(value)} items, over the limit of {limit}", field)
    return value


def _digest(value: Any) -> str:
    text = value.removeprefix("sha256:").lower() if isinstance(value, str) else ""
    if not _HEX64.fullmatch(text):
        raise CertifyReportError(
            "manifest_sha256 must be the sha256 of model-package.json (64 hex)", "manifest_sha256"
        )
    return text


def _text(doc: dict[str, Any], field: str) -> str:
    value = doc.get(field, "")
    if not isinstance(value, str):
        raise CertifyReportError(f"{field} must be a string", field)
    return value[:MAX_TEXT]


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**31:
        raise CertifyReportError("layer_count must be a non-negative integer", "layer_count")
    return value
