"""No dead code: every public top-level function or class the application defines is used by the
application (its code, its templates, its scripts, its benchmarks), or is one of the named test seams below.

Dead code is read, kept typed and kept correct by whoever carries the project on, and it misleads them:
the last review found four such functions (a PR lookup, a delivery filter, a strategy table, a prompt rate
computed on every page) that nothing called (issue 44)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Public names the application does not call that the tests do, each for a reason of its own.
TEST_SEAMS = {
    "gguf_header.parse_header": "the parser's whole-buffer entry point, the fuzz tests' oracle",
    "background.wait_idle": "lets a test wait for the in-process background thread",
    "tasks.wait_eager_deliveries": "lets a test wait for deliveries sent eagerly",
}

# Public names the framework finds by convention, not by a reference.
FOUND_BY_DJANGO = {
    "apps.PackagesAppConfig": "INSTALLED_APPS names the package; Django loads its only AppConfig",
}


def application_sources() -> list[Path]:
    return [p for p in (ROOT / "packages_app").rglob("*.py") if "migrations" not in p.parts]


def users() -> list[Path]:
    """Every file of the application that may use a name: code, templates, scripts, benchmarks."""
    files = application_sources() + list((ROOT / "meshdash").rglob("*.py"))
    files += list((ROOT / "bench").rglob("*.py")) + list((ROOT / "templates").rglob("*.html"))
    files += [p for p in (ROOT / "bin").iterdir() if p.is_file()]
    return files


def unused(sources: Iterable[Path], readers: Iterable[Path], root: Path) -> list[str]:
    """`module.name` of each public top-level def or class (without a decorator, which registers it)
    that no other file names and its own file names once."""
    texts = {path: path.read_text() for path in {*sources, *readers}}
    named_in: dict[str, set[Path]] = {}
    for path, text in texts.items():
        for word in set(WORD.findall(text)):
            named_in.setdefault(word, set()).add(path)
    found = []
    for path in sources:
        module = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
        own_words = WORD.findall(texts[path])
        for node in ast.parse(texts[path]).body:
            if not isinstance(node, ast.FunctionDef | ast.ClassDef) or node.decorator_list:
                continue
            if node.name.startswith("_") or named_in.get(node.name, set()) - {path}:
                continue
            if own_words.count(node.name) > 1:  # used in its own module
                continue
            found.append(f"{module.removeprefix('packages_app.')}.{node.name}")
    return sorted(found)


def test_every_public_function_and_class_is_used_by_the_application() -> None:
    dead = [
        name
        for name in unused(application_sources(), users(), ROOT)
        if name not in TEST_SEAMS | FOUND_BY_DJANGO.keys()
    ]
    assert not dead, f"defined and never used by the application: {dead}"


def test_every_test_seam_is_still_defined_and_unused_by_the_application() -> None:
    # A seam the application starts using, or that is gone, leaves these lists.
    assert sorted(TEST_SEAMS | FOUND_BY_DJANGO.keys()) == unused(application_sources(), users(), ROOT)


def test_the_check_finds_a_planted_unused_function(tmp_path: Path) -> None:
    # Control: the same check over a planted tree finds the function nothing calls, and not the used one.
    package = tmp_path / "packages_app"
    package.mkdir()
    (package / "figures.py").write_text(
        "def used() -> int:\n    return 1\n\n\ndef prompt_rate() -> int:\n    return 2\n"
    )
    (package / "pages.py").write_text("from packages_app.figures import used\n\nused()\n")
    sources = list(package.glob("*.py"))
    assert unused(sources, sources, tmp_path) == ["figures.prompt_rate"]
