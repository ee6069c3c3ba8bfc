"""No file in the repository refers to a document outside it (issue 44): whoever carries the project on has
only the repository. Every `docs/<name>.md` a file names exists, and nothing points at the specification
folder the project was started from (`../shared/...`), whose facts are in docs/ with their sources."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = re.compile(r"(?<![\w/.-])docs/([\w./-]+?\.md)\b")
OUTSIDE = re.compile(r"\.\./shared/|/work/shared|shared/docs/")
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()


def text_files(root: Path) -> dict[str, str]:
    """Every tracked text file's contents, by path (binary files skipped)."""
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
    found = {}
    for name in listed.stdout.splitlines():
        path = root / name
        if name == THIS_FILE or not path.is_file():
            continue
        try:
            found[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return found


def broken_references(files: dict[str, str], root: Path) -> list[str]:
    broken = []
    for name, text in files.items():
        for doc in sorted(set(DOC.findall(text))):
            if not (root / "docs" / doc).is_file():
                broken.append(f"{name}: docs/{doc} does not exist")
        if OUTSIDE.search(text):
            broken.append(f"{name}: refers to a document outside the repository")
    return broken


def test_every_document_a_file_names_is_in_the_repository() -> None:
    files = text_files(ROOT)
    assert len(files) > 100
    assert broken_references(files, ROOT) == []


def test_control_a_reference_to_a_missing_or_outside_document_is_found() -> None:
    planted = {
        "packages_app/x.py": "# see docs/rules.md section 6b and docs/roster.md",
        "README.md": "The rules: ../shared/docs/rules.md",
    }
    assert broken_references(planted, ROOT) == [
        "packages_app/x.py: docs/roster.md does not exist",
        "README.md: refers to a document outside the repository",
    ]
