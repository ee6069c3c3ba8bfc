"""Verdicts and statuses have one owner (packages_app/verdicts.py, its StrEnums): the code names their
members, never their spellings. A literal "undeclared-mtp" in a producer is a verdict the type checker
cannot follow and a rename cannot find (issue 44: the judgement returned strings while verdicts.py said
producers return members)."""

from __future__ import annotations

import ast
from pathlib import Path

from packages_app.verdicts import Status, Verdict
from tests.audit_fixtures import QWEN35, build

ROOT = Path(__file__).resolve().parent.parent
OWNER = ROOT / "packages_app" / "verdicts.py"
SPELLINGS = frozenset({*(v.value for v in Verdict), *(s.value for s in Status)})


def literals(source: str, name: str) -> list[str]:
    """`name:line "spelling"` for each string constant that spells a verdict or a status."""
    return [
        f'{name}:{node.lineno} "{node.value}"'
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SPELLINGS
    ]


def code_files() -> list[Path]:
    return [
        p
        for p in (ROOT / "packages_app").rglob("*.py")
        if "migrations" not in p.parts and p != OWNER  # migrations keep what they wrote then
    ]


def test_no_code_spells_a_verdict_or_a_status_outside_its_owner() -> None:
    found = [hit for p in code_files() for hit in literals(p.read_text(), p.relative_to(ROOT).as_posix())]
    assert found == []


def test_control_a_planted_literal_in_a_producer_is_found() -> None:
    planted = 'def judge() -> str:\n    return "undeclared-mtp"\n'
    assert literals(planted, "packages_app/audit/judgement.py") == [
        'packages_app/audit/judgement.py:2 "undeclared-mtp"'
    ]


def test_the_judgement_returns_members() -> None:
    # The motivating case: Qwen3.5 ships NextN weights at block 40 and declares nothing.
    result = build(QWEN35, 1).audit()
    assert type(result.verdict) is Verdict and result.verdict is Verdict.UNDECLARED_MTP
    assert result.to_json()["verdict"] == "undeclared-mtp"  # stored as its spelling
