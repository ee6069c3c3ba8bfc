"""audit.certify_report (pure): each malformed part of a `mesh-llm models certify` report is refused naming
its field, and a report's one-line summary says where it stopped."""

from __future__ import annotations

from typing import Any

import pytest

from packages_app.audit.certify_report import CertifyReportError, parse_certify_report
from packages_app.audit.model import FileCheck, WriterShape
from tests.test_certify_reports import report


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"package_gate": "passed"}, "package_gate"),
        ({"package_gate": {"name": " ", "status": "passed"}}, "package_gate.name"),
        ({"package_gate": {"name": "p", "status": "passed", "details": 3}}, "package_gate.details"),
        ({"model_id": ["unsloth/Qwen3.8-27B-GGUF"]}, "model_id"),
    ],
)
def test_a_malformed_part_is_refused_naming_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(CertifyReportError) as refused:
        parse_certify_report(report() | change)
    assert refused.value.field == field


def test_an_incomplete_report_names_the_gates_it_waits_for() -> None:
    doc = report()
    doc["runtime_gates"][2]["status"] = "incomplete"
    doc["status"] = "incomplete"
    assert parse_certify_report(doc).summary() == "incomplete (v1_responses)"


def test_stored_file_checks_and_writer_shapes_of_the_wrong_shape_read_as_none() -> None:
    assert FileCheck.from_json({"status": "match"}) is None  # no path: nothing to show it beside
    assert WriterShape.from_json({"shape": "a-shape-of-a-newer-version"}) is None
    assert WriterShape.from_json({"shape": "deep", "reason": 3}) == WriterShape("deep", "")
