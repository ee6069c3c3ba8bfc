"""No module of the core over 600 lines (issue 44): a module that long has gained a second job, and whoever
carries the project on reads it whole to change one part.

The core is packages_app without devhub/ and devnode/ (the imitations of the Hub and of a node, which
only the demo and the tests run) and migrations/ (written by Django). Modules other branches are still
cutting are named in NOT_YET_SPLIT with why; an entry that is no longer over the limit (split, or gone)
fails the test too, so the list only shrinks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "packages_app"
LIMIT = 600
OUTSIDE_THE_CORE = ("devhub", "devnode", "migrations")

# Each: its length today and why it waits.
NOT_YET_SPLIT = {
    "packages_app/queries.py": "872 lines: six concerns, to be cut into catalog/ by page",
}


def core_modules(root: Path) -> dict[str, int]:
    """Every module of the core, by its path from the root, with its number of lines."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        inside = path.relative_to(root / PACKAGE).parts
        if inside[0] in OUTSIDE_THE_CORE:
            continue
        found[path.relative_to(root).as_posix()] = len(path.read_text(encoding="utf-8").splitlines())
    return found


def oversized(root: Path, not_yet: Mapping[str, str] = NOT_YET_SPLIT, limit: int = LIMIT) -> list[str]:
    """The core modules over the limit that are not named as not yet split, with their lengths."""
    modules = core_modules(root)
    return [
        f"{path}: {lines} lines" for path, lines in modules.items() if lines > limit and path not in not_yet
    ]


def split_already(root: Path, not_yet: Mapping[str, str] = NOT_YET_SPLIT, limit: int = LIMIT) -> list[str]:
    """The entries of the not-yet list that are gone or no longer over the limit: they leave the list."""
    modules = core_modules(root)
    return sorted(path for path in not_yet if modules.get(path, 0) <= limit)


def test_no_module_of_the_core_is_over_600_lines() -> None:
    assert oversized(ROOT) == []


def test_every_module_named_as_not_yet_split_is_still_over_600_lines() -> None:
    assert split_already(ROOT) == [], "split: remove it from NOT_YET_SPLIT"


def plant(root: Path, files: Mapping[str, int]) -> Path:
    """A tree with each module of the given number of lines."""
    for name, lines in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines, encoding="utf-8")
    return root


def test_a_planted_601_line_module_fails_and_a_600_line_one_passes(tmp_path: Path) -> None:
    root = plant(tmp_path, {"long.py": 601, "web/fits.py": 600, "small.py": 3})
    assert oversized(root, {}) == ["packages_app/long.py: 601 lines"]


def test_a_module_deep_in_a_package_of_the_core_counts(tmp_path: Path) -> None:
    root = plant(tmp_path, {"management/commands/seed.py": 700})
    assert oversized(root, {}) == ["packages_app/management/commands/seed.py: 700 lines"]


def test_the_imitations_and_the_migrations_are_outside_the_core(tmp_path: Path) -> None:
    root = plant(
        tmp_path, {"devhub/server.py": 1400, "devnode/payloads.py": 900, "migrations/0001_x.py": 2000}
    )
    assert oversized(root, {}) == []
    # the control: the same file in the core is found
    assert oversized(plant(tmp_path, {"server.py": 1400}), {}) == ["packages_app/server.py: 1400 lines"]


def test_a_module_named_as_not_yet_split_passes_while_it_is_over_the_limit(tmp_path: Path) -> None:
    root = plant(tmp_path, {"fleet.py": 2000})
    not_yet = {"packages_app/fleet.py": "being cut"}
    assert oversized(root, not_yet) == [] and split_already(root, not_yet) == []


def test_a_not_yet_entry_that_was_split_or_removed_is_found(tmp_path: Path) -> None:
    root = plant(tmp_path, {"fleet.py": 600})
    not_yet = {"packages_app/fleet.py": "being cut", "packages_app/gone.py": "being cut"}
    assert split_already(root, not_yet) == ["packages_app/fleet.py", "packages_app/gone.py"]
