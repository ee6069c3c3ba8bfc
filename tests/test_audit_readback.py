"""The stored audit reads back typed (audit.revision.StoredAudit, ``Revision.audited``): what
``Audit.to_json`` stored comes back as the same document, anything else (an older audit, a capped one, a
hostile one) reads as empty values and never raises; and no code outside models/catalog.py reads the stored
audit by key (issue 44)."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from packages_app.audit import Audit
from packages_app.audit.revision import STORED_SECTIONS, StoredAudit
from packages_app.verdicts import Verdict
from tests.audit_fixtures import GLM47, LLAMA, NEMOTRON, QWEN35, build, mtp_generation
from tests.test_request_defaults import thinking_and_direct

ROOT = Path(__file__).resolve().parent.parent


@functools.cache  # ten builds and audits: once per process, not once per test (70 s of the pass)
def audits() -> dict[str, Audit]:
    """The audits the tests read back. Shared by every test: each reads its audit's fresh to_json()."""
    qwen = build(QWEN35, 2)
    with_defaults = qwen.with_manifest(
        qwen.manifest | {"generation": {"request_defaults": thinking_and_direct()}}
    )
    return {
        "qwen35-v1-undeclared": build(QWEN35, 1).audit(),
        "qwen35-v2-undeclared": qwen.audit(),
        "qwen35-v1-declared": build(QWEN35, 1, mtp_generation(1, [40])).audit(),
        "qwen35-v2-declared": build(QWEN35, 2, mtp_generation(2, [40])).audit(),
        "qwen35-declared-deep": build(QWEN35, 2, mtp_generation(2, [40], depth=2)).audit(),
        "glm47": build(GLM47, 2).audit(),
        "nemotron": build(NEMOTRON, 1).audit(),
        "llama-no-mtp": build(LLAMA, 1).audit(),
        "llama-declared-without-weights": build(LLAMA, 2, mtp_generation(2, [15])).audit(),
        "request-defaults": with_defaults.audit(),
    }


@pytest.mark.parametrize("name", list(audits()))
def test_what_the_audit_stored_reads_back_as_the_same_document(name: str) -> None:
    result = audits()[name]
    stored = json.loads(json.dumps(result.to_json()))  # what the JSON column gives back
    read = StoredAudit.from_json(stored)
    assert read.present and read.verdict is result.verdict
    assert read.to_json() == {key: stored[key] for key in STORED_SECTIONS}


def test_the_fixtures_cover_every_section_and_verdict_shape_the_pages_show() -> None:
    read = [StoredAudit.from_json(a.to_json()) for a in audits().values()]
    assert {r.verdict for r in read} >= {
        Verdict.UNDECLARED_MTP,
        Verdict.CONSISTENT_MTP,
        Verdict.CONSISTENT_NO_MTP,
        Verdict.DECLARED_WITHOUT_WEIGHTS,
    }
    assert any(r.suggestion and r.suggestion.writer for r in read)
    assert any(r.request_defaults and r.request_defaults.profiles for r in read)
    assert any(r.detected.missing_nextn_tensors or r.detected.blocks for r in read)
    assert all(r.provenance.files for r in read) and any(r.compatibility for r in read)


WRONG = [None, 1, True, "x", [], {}, [1, "a", None, {}, []], {"x": 1, "1": None}, {"index": "7"}]


@pytest.mark.parametrize("section", [*STORED_SECTIONS, "verdict", "truncated"])
@pytest.mark.parametrize("value", WRONG, ids=[json.dumps(v) for v in WRONG])
def test_a_section_of_the_wrong_shape_reads_as_empty_never_raises(section: str, value: Any) -> None:
    doc = audits()["qwen35-v1-undeclared"].to_json() | {section: value}
    read = StoredAudit.from_json(doc)
    json.dumps(read.to_json())  # still a document the API can send


@pytest.mark.parametrize("doc", [None, [], "audit", 3])
def test_a_revision_never_audited_reads_as_absent(doc: Any) -> None:
    read = StoredAudit.from_json(doc)
    assert not read.present and read.verdict is None and read.problems == ()
    assert read.to_json() == dict.fromkeys(STORED_SECTIONS) | {"problems": [], "compatibility": []}


def test_a_capped_audit_says_what_was_cut() -> None:
    doc = audits()["qwen35-v1-undeclared"].to_json()
    doc["suggested_generation"]["patched_manifest"] = None  # ingest.cap_audit dropped the text
    doc["truncated"] = [{"path": "suggested_generation.patched_manifest", "kept": 0, "total": 9_000_000}]
    read = StoredAudit.from_json(doc)
    assert read.was_cut("suggested_generation.patched_manifest") and read.suggestion is not None
    assert read.suggestion.patched_manifest == ""


# --- nothing else reads the stored audit by key ---------------------------------------------------------

# models/catalog.py reads the column once (Revision.audited); ingest writes it; the admin shows it whole.
OWNERS = {"packages_app/models/catalog.py"}


def key_reads(source: str, name: str) -> list[str]:
    """`name:line` of each ``<x>.audit[...]`` or ``<x>.audit.get(...)``."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        keyed = isinstance(node, ast.Subscript) or (isinstance(node, ast.Attribute) and node.attr == "get")
        target = node.value if keyed else None  # type: ignore[attr-defined]
        if isinstance(target, ast.Attribute) and target.attr == "audit":
            found.append(f"{name}:{node.lineno}")
    return found


def test_no_code_outside_the_model_reads_the_stored_audit_by_key() -> None:
    files = [p for p in (ROOT / "packages_app").rglob("*.py") if "migrations" not in p.parts]
    found = [
        hit
        for p in files
        if (name := p.relative_to(ROOT).as_posix()) not in OWNERS
        for hit in key_reads(p.read_text(), name)
    ]
    assert found == []


def test_control_a_planted_key_read_is_found() -> None:
    planted = 'def page(revision):\n    return revision.audit.get("detected"), revision.audit["problems"]\n'
    assert key_reads(planted, "packages_app/web/pages.py") == [
        "packages_app/web/pages.py:2",
        "packages_app/web/pages.py:2",
    ]


def test_request_defaults_read_back_with_publisher_defaults_and_without_a_selection() -> None:
    from packages_app.audit.request_defaults import DtypeDefault, RequestDefaults

    made = RequestDefaults(
        declared=True,
        publisher_defaults=(DtypeDefault("compute_dtype", "bf16", "layer-0", "torch_dtype"),),
        notes=("v1: no request defaults",),
    )
    assert RequestDefaults.from_json(made.to_json()) == made
    doc = made.to_json() | {
        "publisher_defaults": [{"key": "kv_cache_dtype"}, 7],  # a row without its fields is left out
        "profiles": [{"max_tokens": 5}],  # a profile without a name is left out
        "selection": {"reasoning_on": "x"},  # a selection without its automatic profile is none
    }
    read = RequestDefaults.from_json(doc)
    assert read is not None and read.publisher_defaults == () and read.profiles == ()
    assert read.selection is None and read.default_profile is None
