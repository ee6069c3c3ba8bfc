"""One name, one thing (issue 44): no two classes of the core share a name unless the duplicate is listed here
with its reason. Two ``Plan``s, ``Figures`` or ``NodeCell``s that meant different things made a reader of
either guess which one a signature meant. The core is packages_app without devhub/ and devnode/, which
imitate the Hub and a node and may mirror the real names. The allowed list only shrinks: an entry that is
no longer a duplicate fails too, so it is removed when its last twin is renamed.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.test_import_rules import ROOT, package_modules, plant

IMITATIONS = ("packages_app.devhub", "packages_app.devnode")

# name -> why its classes are kept under one name (the same concept, deliberately mirrored).
ALLOWED: dict[str, str] = {
    "Command": "Django's convention: each management command module defines its Command",
    "Migration": "Django's convention: each migration module defines its Migration",
    "CertifyReport": "the model stores what audit.certify_report.CertifyReport is: one report, kept and read",
    "InvalidRepoId": "hub.errors.InvalidRepoId subclasses repo_ids.InvalidRepoId : one error",
    "Observations": "nodes.run_schema validates what a node says about itself; fleet.runs is the same "
    "observations as the node's page shows them (docs/node-report.md section 5)",
    "Stage": "nodes.report_schema validates a reported split stage; fleet.stages is the same stage as the "
    "fleet pages show it",
}


def class_names(root: Path) -> dict[str, list[str]]:
    """Each class name defined at the top level of a core module -> the modules defining it."""
    found: dict[str, list[str]] = {}
    for module, path in package_modules(root).items():
        if any(module == m or module.startswith(m + ".") for m in IMITATIONS):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(module)
    return found


def duplicates(root: Path, allowed: Mapping[str, str] = ALLOWED) -> list[str]:
    """Class names two core modules define that the allowed list does not name, with where."""
    return [
        f"{name}: {', '.join(modules)}"
        for name, modules in sorted(class_names(root).items())
        if len(modules) > 1 and name not in allowed
    ]


def test_no_two_core_classes_share_a_name_unless_allowed() -> None:
    assert duplicates(ROOT) == []


def test_every_allowed_duplicate_still_is_one() -> None:
    names = class_names(ROOT)
    assert [name for name in ALLOWED if len(names.get(name, [])) < 2] == []


def test_every_allowed_duplicate_gives_its_reason() -> None:
    assert all(reason.strip() for reason in ALLOWED.values())


def test_a_planted_duplicate_fails_and_an_allowed_one_passes(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "a.py": "class Plan:\n    pass\n\n\nclass Command:\n    pass\n",
            "b.py": "class Plan:\n    pass\n\n\nclass Command:\n    pass\n",
            "devhub/server.py": "class Plan:\n    pass\n",  # an imitation: not the core
        },
    )
    assert duplicates(root) == ["Plan: packages_app.a, packages_app.b"]
    assert duplicates(root, {**ALLOWED, "Plan": "planted"}) == []


def test_without_the_planted_twin_nothing_fails(tmp_path: Path) -> None:
    root = plant(tmp_path, {"a.py": "class Plan:\n    pass\n", "devhub/server.py": "class Plan:\n    pass\n"})
    assert duplicates(root) == []
