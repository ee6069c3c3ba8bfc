"""The shape of packages_app: dependencies point one way, pure modules stay pure, no import cycles, no
module reaching into another's private names.

Every module belongs to a layer (the longest matching prefix in LAYERS). A module may import modules of its
own layer or lower ones, never a higher one; pure modules import nothing from Django or Celery; the hub layer
reads only django.conf. Function-local imports count like any other: a lazy import is still a dependency.
Every name LAYERS lists must exist in the tree, so a module that was removed or renamed fails the test instead
of leaving a rule that guards nothing. A leading underscore means "this module's own": no module imports such
a name from another module, nor reads it as an attribute of a module it imported.
"""

from __future__ import annotations

import ast
import json
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
    "packages_app.gguf_header": PURE,  # the entry points and the CLI
    "packages_app.gguf_parser": PURE,
    "packages_app.gguf_errors": PURE,
    "packages_app.gguf_fields": PURE,
    "packages_app.gguf_results": PURE,
    "packages_app.manifest": PURE,
    "packages_app.input_budget": PURE,  # what one body of untrusted input may cost a parser
    "packages_app.audit": PURE,
    "packages_app.charts": PURE,
    "packages_app.nodes.report_schema": PURE,
    "packages_app.nodes.run_schema": PURE,  # the run registration body; builds on report_schema
    "packages_app.nodes.otlp": PURE,
    "packages_app.nodes.agent": PURE,
    "packages_app.nodes.agent_common": PURE,
    "packages_app.nodes.agent_baseline": PURE,
    "packages_app.nodes.agent_config": PURE,
    "packages_app.nodes.agent_observations": PURE,
    "packages_app.nodes.agent_runs": PURE,
    "packages_app.nodes.agent_spool": PURE,
    "packages_app.nodes.exposition": PURE,
    "packages_app.devhub": PURE,
    "packages_app.devnode": PURE,
    "packages_app.sketch": PURE,
    "packages_app.metrics": PURE,
    "packages_app.report_metrics": PURE,
    "packages_app.report_time": PURE,
    # the one door to the Hub and to outbound HTTP, and the read plans built on it
    "packages_app.hub": HUB,
    "packages_app.inspection": HUB,
    "packages_app.verify": HUB,
    # storage
    "packages_app.models": MODELS,
    "packages_app.apps": MODELS,
    "packages_app.pgtime": MODELS,  # how a database connection reads timestamps
    "packages_app.compiled": MODELS,  # querysets compiled once, their values bound per read
    "packages_app.judgement_expiry": MODELS,  # deletes expire the kept judgements they change
    "packages_app.migrations": MODELS,
    # services (write) and selectors (read)
    "packages_app.ingest": SERVICES,
    "packages_app.tracking": SERVICES,
    "packages_app.fix_plans": SERVICES,
    "packages_app.fix_proposals": SERVICES,
    "packages_app.fix_following": SERVICES,
    "packages_app.stored_audit": SERVICES,
    "packages_app.reports": SERVICES,
    "packages_app.nodes": SERVICES,
    "packages_app.catalog": SERVICES,
    "packages_app.throughput": SERVICES,
    "packages_app.node_plans": SERVICES,  # a package page's plans, node count and alert, from PlanRollup
    "packages_app.stored_sketch": SERVICES,  # sketch columns read as text, parsed in one call
    "packages_app.fleet": SERVICES,
    "packages_app.rollups": SERVICES,
    "packages_app.partitions": SERVICES,
    "packages_app.telemetry": SERVICES,
    "packages_app.monitoring": SERVICES,
    "packages_app.notifications": SERVICES,
    "packages_app.certify_reports": SERVICES,
    "packages_app.baselines": SERVICES,
    "packages_app.speedup_cells": SERVICES,  # the per-node cells the speedups read
    "packages_app.mesh_acceptance": SERVICES,  # the speedups' acceptance counts, added up where stored
    "packages_app.judgements": SERVICES,
    "packages_app.seeding": SERVICES,  # the synthetic rows seed_synthetic writes, for the benchmarks
    # Celery tasks: ids in, one service call, follow-ups enqueued
    "packages_app.tasks": TASKS,
    # edges: HTTP and gRPC under web/; commands, admin, template tags where Django finds them; the door
    # they all enqueue through (queueing)
    "packages_app.web": EDGES,
    "packages_app": EDGES,
}
# web/ answers requests: it reaches the Hub and the workers only through queueing (web/__init__.py), so a
# request never loads the Hub client or the tasks, not even in a function-local import.
WEB = "packages_app.web"
KEPT_OUT_OF_WEB = ("packages_app.hub", "packages_app.tasks", "huggingface_hub")
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
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolved_base(node, module, path)
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


def missing_layer_modules(
    root: Path, layers: Mapping[str, int] = LAYERS, package: str = PACKAGE
) -> list[str]:
    """The LAYERS entries that name no module or package of the tree: rules that guard nothing."""
    modules = package_modules(root, package)
    return sorted(name for name in layers if name not in modules)


def web_imports_kept_out(root: Path, package: str = PACKAGE) -> list[Violation]:
    """Every import of the Hub client or the tasks by a module of web/, one per import statement."""
    found: dict[tuple[str, int], Violation] = {}
    for module, path in package_modules(root, package).items():
        if module != WEB and not module.startswith(WEB + "."):
            continue
        for target, line in imports_of(path, module):
            if any(target == kept or target.startswith(kept + ".") for kept in KEPT_OUT_OF_WEB):
                message = f"imports {target}; web/ enqueues through queueing"
                found.setdefault((module, line), Violation(module, line, message))
    return list(found.values())


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")  # __version__, __all__ are public


def private_name_uses(root: Path, package: str = PACKAGE) -> list[Violation]:
    """Every private name a module of the package takes from another module of the package.

    Two ways in: `from m import _x` (relative imports resolved, function-local ones included), and `m._x`
    read on a name bound by `import m` / `from p import m`. Private names of other libraries (`os._exit`)
    are the libraries' business, not this rule's.
    """
    modules = package_modules(root, package)
    found: list[Violation] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # a local name -> the package module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = resolved_base(node, module, path)
                for alias in node.names:
                    if base in modules and is_private(alias.name):
                        message = f"imports the private name {alias.name} from {base}"
                        found.append(Violation(module, node.lineno, message))
                    if f"{base}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        bound[alias.asname] = alias.name
                    elif alias.name.split(".")[0] == package:
                        bound[package] = package
        found.extend(_private_attributes(tree, module, bound, modules))
    return found


def resolved_base(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The module a `from ... import` reads from, relative imports resolved against the file's package."""
    base = node.module or ""
    if not node.level:
        return base
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


def _private_attributes(
    tree: ast.AST, module: str, bound: Mapping[str, str], modules: Mapping[str, Path]
) -> Iterator[Violation]:
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        owner = _dotted(node.value)
        if owner is None or owner.split(".")[0] not in bound:
            continue
        first, _, rest = owner.partition(".")
        target = ".".join(filter(None, [bound[first], rest]))
        if target in modules and target != module:
            yield Violation(module, node.lineno, f"reads the private name {target}.{node.attr}")


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of names, None for anything else (a call, a subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


# The private imports packages_app/audit/ still has today (issue 26): the lead removes them while rewriting
# audit/, and empties this list. Only audit/ may appear here; an entry that no longer matches an import
# fails the test too, so the list can only shrink.
PRIVATE_IMPORTS_BEING_REMOVED: frozenset[tuple[str, str]] = frozenset()  # emptied: audit/ takes public names


def test_packages_app_keeps_its_layers_and_has_no_cycles() -> None:
    violations = check(ROOT)
    assert not violations, "\n".join(map(str, violations))


def test_every_module_the_layers_name_exists_in_the_tree() -> None:
    assert missing_layer_modules(ROOT) == []


def test_the_web_edges_import_neither_the_hub_client_nor_the_tasks() -> None:
    violations = web_imports_kept_out(ROOT)
    assert not violations, "\n".join(map(str, violations))


def test_no_module_takes_another_modules_private_names() -> None:
    found = {(v.module, v.message): v for v in private_name_uses(ROOT)}
    assert all(module.startswith("packages_app.audit.") for module, _ in PRIVATE_IMPORTS_BEING_REMOVED)
    unexpected = [str(v) for key, v in found.items() if key not in PRIVATE_IMPORTS_BEING_REMOVED]
    assert not unexpected, "\n".join(unexpected)
    gone = PRIVATE_IMPORTS_BEING_REMOVED - set(found)
    assert not gone, f"fixed: remove from PRIVATE_IMPORTS_BEING_REMOVED: {sorted(gone)}"


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
        (
            {"catalog/listing.py": "from packages_app.web import forms\n", "web/forms.py": ""},
            "a layer above its own",
        ),
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
        "web/pages.py": "from packages_app import ingest\n",
    }
    assert check(plant(tmp_path, files)) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"web/pages.py": "def reingest():\n    from packages_app import tasks\n", "tasks.py": ""},
            ["packages_app.web.pages:2: imports packages_app.tasks; web/ enqueues through queueing"],
        ),
        (
            {"web/api.py": "from packages_app.hub.client import HubSource\n"},
            ["packages_app.web.api:1: imports packages_app.hub.client; web/ enqueues through queueing"],
        ),
        (
            {"web/webhooks.py": "import huggingface_hub\n"},
            ["packages_app.web.webhooks:1: imports huggingface_hub; web/ enqueues through queueing"],
        ),
        # the controls: the door to the workers, and the same imports outside web/
        ({"web/pages.py": "from packages_app import queueing\n", "queueing.py": ""}, []),
        ({"management/commands/ingest.py": "from packages_app import tasks\n", "tasks.py": ""}, []),
    ],
)
def test_the_web_rule_catches_a_planted_import(
    tmp_path: Path, files: Mapping[str, str], expected: list[str]
) -> None:
    assert [str(v) for v in web_imports_kept_out(plant(tmp_path, files))] == expected


def test_a_listed_module_that_is_gone_fails_the_layer_check(tmp_path: Path) -> None:
    root = plant(tmp_path, {"layout.py": "", "models.py": ""})
    layers = {"packages_app.layout": PURE, "packages_app.models": MODELS, "packages_app": EDGES}
    assert missing_layer_modules(root, layers) == []  # the control: every listed module is there
    stale = {**layers, "packages_app.capability": PURE, "packages_app.models.extra": MODELS}
    assert missing_layer_modules(root, stale) == ["packages_app.capability", "packages_app.models.extra"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"reader.py": "def _show(v): ...\n", "parse.py": "from packages_app.reader import _show\n"},
            "packages_app.parse:1: imports the private name _show from packages_app.reader",
        ),
        (
            {"m/__init__.py": "", "m/a.py": "_X = 1\n", "m/b.py": "x = 1\nfrom .a import _X\n"},
            "packages_app.m.b:2: imports the private name _X from packages_app.m.a",
        ),
        (
            {"a.py": "", "b.py": "def f():\n    from packages_app.a import _g\n"},
            "packages_app.b:2: imports the private name _g from packages_app.a",
        ),
        (
            {"a.py": "", "b.py": "from packages_app import a\n\nx = a._g()\n"},
            "packages_app.b:3: reads the private name packages_app.a._g",
        ),
        (
            {"a.py": "", "b.py": "import packages_app.a as m\nm._g\n"},
            "packages_app.b:2: reads the private name packages_app.a._g",
        ),
        (
            {"m/__init__.py": "", "m/a.py": "", "b.py": "import packages_app.m.a\npackages_app.m.a._g\n"},
            "packages_app.b:2: reads the private name packages_app.m.a._g",
        ),
    ],
)
def test_the_private_name_rule_catches_a_planted_violation(
    tmp_path: Path, files: Mapping[str, str], expected: str
) -> None:
    assert [str(v) for v in private_name_uses(plant(tmp_path, files))] == [expected]


def test_public_names_own_names_and_other_libraries_private_names_pass(tmp_path: Path) -> None:
    files = {
        "a.py": "__version__ = '1'\ndef show(v): ...\n_OWN = 1\n",
        "b.py": (
            "import os\nfrom packages_app import a\nfrom packages_app.a import __version__, show\n\n"
            "class C:\n    def _f(self): return self._g, a.show, _OWN\n\nos._exit\n_OWN = 2\n"
        ),
    }
    assert private_name_uses(plant(tmp_path, files)) == []


def test_the_web_process_does_not_load_the_hub_client_or_the_tasks() -> None:
    code = (
        "import django, json, sys; django.setup(); import meshdash.urls;"
        f"print(json.dumps([sorted(m for m in sys.modules if m.startswith({KEPT_OUT_OF_WEB!r})),"
        f" sorted(m for m in sys.modules if m.startswith('{WEB}.'))]))"
    )
    env = {"DJANGO_SETTINGS_MODULE": "meshdash.settings", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    kept_out, edges = json.loads(out.stdout)
    assert kept_out == []
    # the control: the URL conf did load the edges, so the empty list above is about them
    assert {f"{WEB}.pages", f"{WEB}.api", f"{WEB}.api_telemetry", f"{WEB}.webhooks"} <= set(edges)
