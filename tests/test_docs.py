"""RELIABILITY.md names the test that proves each guarantee: every name it gives must be a test that exists.

A section says which file its bare names are in (a cell or a sentence holding `tests/<file>.py::`); a name
written as `tests/<file>.py::test_x` is looked up in that file. Parametrised ids (`[refuse-200]`) name the
function before the bracket.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = re.compile(r"`(tests/[\w/]+\.py)::`")
NAME = re.compile(r"`(?:(tests/[\w/]+\.py)::)?(test_\w+)(?:\[[^\]`]*\])?`")


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def named_tests(text: str) -> list[tuple[str, str]]:
    """(file, test) for every test name the document gives, section by section."""
    found: list[tuple[str, str]] = []
    for section in re.split(r"^## ", text, flags=re.MULTILINE):
        default = DEFAULT_FILE.search(section)
        for file, name in NAME.findall(section):
            found.append((file or (default[1] if default else "?"), name))
    return found


def missing_tests(text: str, root: Path = ROOT) -> list[str]:
    cache: dict[str, set[str]] = {}
    missing = []
    for file, name in named_tests(text):
        path = root / file
        if file not in cache:
            cache[file] = defined_tests(path) if path.is_file() else set()
        if name not in cache[file]:
            missing.append(f"{file}::{name}")
    return missing


def test_every_test_reliability_md_names_exists() -> None:
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    assert len(named_tests(text)) > 100
    assert missing_tests(text) == []


def test_a_renamed_or_misfiled_test_is_caught(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_it_holds():\n    pass\n")
    good = (
        "## A\n\n| guarantee | proved by (`tests/test_a.py::`) |\n|---|---|\n| x | `test_it_holds[p-1]` |\n"
    )
    assert missing_tests(good, tmp_path) == []  # the control: the name is there
    assert missing_tests(good.replace("it_holds", "it_held"), tmp_path) == ["tests/test_a.py::test_it_held"]
    elsewhere = "## B\n\n`tests/test_b.py::test_it_holds`\n"
    assert missing_tests(elsewhere, tmp_path) == ["tests/test_b.py::test_it_holds"]
