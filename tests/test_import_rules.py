"""The shape of packages_app: dependencies point one way, pure modules stay pure, no import cycles.

Every module belongs to a layer (the longest matching prefix in LAYERS). A module may import modules of its
own layer or lower ones, never a higher one; pure modules import nothing from Django or Celery; the hub layer
reads only django.conf. Function-local imports count like any other: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "packages_app"

PURE, HUB, MODELS, SERVICES, TASKS, EDGES = range(6)
LAYER_NAMES = ("pure", "hub", "models", "services/selectors", "tasks", "edges")
LAYERS: Mapping[str, int] = {
    # pure: no Django, no I/O beyond what a caller hands in
    "packages_app.layout": PURE,
    "packages_app.repo_ids": PURE,
    "packages_app.verdicts": PURE,
    "packages_app.glossary": PURE,
    "packages_app.gguf_header": PURE,
    "packages_app.gguf": PURE,
    "packages_app.manifest": PURE,
    "packages_app.capability": PURE,
    "packages_app.audit": PURE,
    "packages_app.charts": PURE,
    "packages_app.report_schema": PURE,
    "packages_app.nodes.report_schema": PURE,
    "packages_app.nodes.otlp": PURE,
    "packages_app.nodes.agent": PURE,
    "packages_app.devhub": PURE,
    "packages_app.devnode": PURE,
    "packages_app.sketch": PURE,
    # the one door to the Hub and to outbound HTTP, and the read plans built on it
    "packages_app.hub": HUB,
    "packages_app.inspection": HUB,
    "packages_app.verify": HUB,
    # storage
    "packages_app.models": MODELS,
    "packages_app.apps": MODELS,
    "packages_app.migrations": MODELS,
    # services (write) and selectors (read)
    "packages_app.ingest": SERVICES,
    "packages_app.reports": SERVICES,
    "packages_app.nodes": SERVICES,
    "packages_app.queries": SERVICES,
    "packages_app.throughput": SERVICES,
    "packages_app.fleet": SERVICES,
    "packages_app.rollups": SERVICES,
    "packages_app.partitions": SERVICES,
    "packages_app.audit_log": SERVICES,
    "packages_app.telemetry": SERVICES,
    # Celery tasks: ids in, one service call, follow-ups enqueued
    "packages_app.tasks": TASKS,
    # edges: HTTP, commands, admin, templates, and the door they enqueue through
    "packages_app": EDGES,
}
ALLOWED_FRAMEWORK = {PURE: (), HUB: ("django.conf",)}
FRAMEWORKS = ("django", "celery", "kombu")


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.message}"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str, layers: Mapping[str, int] = LAYERS) -> int:
    for prefix in sorted(layers, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return layers[prefix]
    raise KeyError(module)


def imports_of(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, node.lineno
            # `from packages_app import hub` imports the submodule hub
            yield from ((f"{base}.{alias.name}", node.lineno) for alias in node.names)


def package_modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def check(root: Path, layers: Mapping[str, int] = LAYERS, package: str = PACKAGE) -> list[Violation]:
    modules = package_modules(root, package)
    found: list[Violation] = []
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        try:
            own = layer_of(module, layers)
        except KeyError:
            found.append(Violation(module, 1, "belongs to no layer; add it to LAYERS"))
            continue
        graph[module] = set()
        for target, line in imports_of(path, module):
            found.extend(_judge(module, own, target, line, modules, layers, graph))
    found.extend(_cycles(graph))
    return found


def _judge(
    module: str,
    own: int,
    target: str,
    line: int,
    modules: Mapping[str, Path],
    layers: Mapping[str, int],
    graph: dict[str, set[str]],
) -> Iterator[Violation]:
    if target.split(".")[0] in FRAMEWORKS and own in ALLOWED_FRAMEWORK:
        if not target.startswith(ALLOWED_FRAMEWORK[own]):
            yield Violation(module, line, f"a {LAYER_NAMES[own]} module imports {target}")
        return
    if target not in modules or target in (module, PACKAGE):  # packages_app/__init__.py is empty
        return
    graph[module].add(target)
    theirs = layer_of(target, layers)
    if theirs > own:
        message = f"imports {target} ({LAYER_NAMES[theirs]}), a layer above its own ({LAYER_NAMES[own]})"
        yield Violation(module, line, message)


def _cycles(graph: Mapping[str, set[str]]) -> Iterator[Violation]:
    """One violation per import cycle, found depth first; a package importing its own parts is no cycle."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> Iterator[Violation]:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target.startswith(module + "."):
                continue  # a package's __init__ re-exporting its own submodules
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                yield Violation(module, 1, "import cycle: " + " -> ".join(cycle))
            elif target not in state:
                yield from visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            yield from visit(module)


def test_packages_app_keeps_its_layers_and_has_no_cycles() -> None:
    violations = check(ROOT)
    assert not violations, "\n".join(map(str, violations))


def plant(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / PACKAGE / "__init__.py").touch()
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"layout.py": "from django.conf import settings\n"}, "a pure module imports django.conf"),
        ({"layout.py": "def f():\n    from django.db import models\n"}, "a pure module imports django.db"),
        ({"hub.py": "from django.db import connection\n"}, "a hub module imports django.db"),
        ({"layout.py": "from packages_app import models\n", "models.py": ""}, "imports packages_app.models"),
        ({"reports.py": "from packages_app.tasks import x\n", "tasks.py": ""}, "a layer above its own"),
        ({"queries.py": "from packages_app.forms import F\n", "forms.py": ""}, "a layer above its own"),
        ({"surprise.py": "from packages_app import tasks\n", "tasks.py": ""}, None),
        (
            {
                "ingest.py": "from packages_app import reports\n",
                "reports.py": "from packages_app import ingest\n",
            },
            "import cycle: packages_app.ingest -> packages_app.reports -> packages_app.ingest",
        ),
    ],
)
def test_the_rule_catches_a_planted_violation(
    tmp_path: Path, files: Mapping[str, str], expected: str | None
) -> None:
    violations = [str(v) for v in check(plant(tmp_path, files))]
    if expected is None:  # a module not listed is an edge, the top layer: it may import anything
        assert violations == []
    else:
        assert any(expected in v for v in violations), violations


def test_a_clean_planted_tree_passes(tmp_path: Path) -> None:
    files = {
        "layout.py": "import re\n",
        "models.py": "from django.db import models\nfrom packages_app import layout\n",
        "ingest.py": "from packages_app.models import X\nfrom packages_app import layout\n",
        "views.py": "from packages_app import ingest\n",
    }
    assert check(plant(tmp_path, files)) == []


def test_the_web_process_does_not_load_the_hub_client_or_the_tasks() -> None:
    code = (
        "import django, sys; django.setup(); import meshdash.urls;"
        "print(sorted(m for m in sys.modules if m.startswith(('huggingface_hub', 'packages_app.hub',"
        " 'packages_app.tasks'))))"
    )
    env = {"DJANGO_SETTINGS_MODULE": "meshdash.settings", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
