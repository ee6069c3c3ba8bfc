"""One naming habit (packages_app/README.md, "Naming"): services, selectors and tasks put the verb first.

A public function of a service or selector module is named verb_object when it acts (``create_node``,
``store_report``, ``get_package``) or for what it returns when it only reads (``catalog_page``); never
object_verb (``node_create``): a name that does not start with a verb has no verb before its first
preposition. A Celery task is verb_object too, never shares a name with a service function, and where it
runs the one service of the same name it takes that name plus ``_task`` while keeping the broker name it was
registered under (messages queued before a rename still run). A selector never only passes a call through.
The modules walked are every module of the tree in the services/selectors layer of the import rules
(tests/test_import_rules.py, LAYERS), so a new service is walked the day it is written; and the README's map
must name every module, so the map a newcomer reads is the tree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.test_import_rules import SERVICES, layer_of, package_modules

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "packages_app"
TASKS_MODULE = "packages_app.tasks"
TASK_SUFFIX = "_task"

# The verbs names here start with (and the ones an object_verb name would end with). A new verb is added
# here on purpose: the test cannot tell a verb from a noun by itself.
VERB_WORDS = """
add apply audit authenticate build cap check claim confirm count create delete deliver discover drop export
fetch find get give hash import ingest insert is judge link list load maintain make mark notify open plan
prune quarantine read reaudit rebuild reconcile record refresh register release remove request require
resolve revoke rotate run save send set settle store sync test touch track update upsert validate write
"""
VERBS = frozenset(VERB_WORDS.split())
# A verb after one of these is the object's, not the function's: ``proposals_to_check``.
PREPOSITION_WORDS = "to for of since before after by in on from at with"
PREPOSITIONS = frozenset(PREPOSITION_WORDS.split())


def public_functions(path: Path) -> Iterator[tuple[str, ast.FunctionDef]]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node.name, node


def object_verb(name: str) -> bool:
    """True when a name puts a verb after its object: ``node_create``, ``reports_store_batch``."""
    words = name.split("_")
    if words[0] in VERBS:
        return False
    for word in words[1:]:
        if word in PREPOSITIONS:
            return False
        if word in VERBS:
            return True
    return False


def task_functions(path: Path) -> Iterator[tuple[str, str | None]]:
    """(function name, the ``name=`` it registers under or None) of each ``@shared_task`` in a module."""
    for name, node in public_functions(path):
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if isinstance(target, ast.Name) and target.id == "shared_task":
                registered = [k.value for k in call.keywords if k.arg == "name"] if call else []
                yield name, ast.literal_eval(registered[0]) if registered else None


def naming_violations(
    functions: Iterable[str], tasks: Mapping[str, str | None], module: str = TASKS_MODULE
) -> list[str]:
    """Every name of a service/selector (``functions``) or task (``tasks``: name -> registered name)
    that breaks the habit, with why."""
    functions = set(functions)
    found = [f"{name}: object_verb; put the verb first" for name in sorted(functions) if object_verb(name)]
    for name, registered in sorted(tasks.items()):
        stem = name.removesuffix(TASK_SUFFIX)
        if name.split("_")[0] not in VERBS:
            found.append(f"task {name}: does not start with a verb")
        if name in functions:
            found.append(f"task {name}: reuses a service's name; call it {name}{TASK_SUFFIX}")
        if name.endswith(TASK_SUFFIX) and stem not in functions:
            found.append(f"task {name}: {TASK_SUFFIX} names the service it runs, and there is no {stem}")
        if (registered or f"{module}.{name}") != f"{module}.{stem}":
            found.append(f"task {name}: registered as {registered}, not {module}.{stem} (queued messages)")
    return found


def passthroughs(path: Path) -> list[str]:
    """Public functions whose body only returns a call fed with their own parameters (or attributes of
    them): a caller can make that call itself."""
    found = []
    for name, node in public_functions(path):
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
            continue
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        call = body[0].value
        values = [*call.args, *(k.value for k in call.keywords)]
        if values and all(_of_params(v, params) for v in values):
            found.append(name)
    return found


def _of_params(node: ast.expr, params: set[str]) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in params


def layer_files(root: Path, layer: int = SERVICES) -> list[Path]:
    """Every module file of the tree in one layer of the import rules (services and selectors by default)."""
    return [path for module, path in package_modules(root).items() if layer_of(module) == layer]


def unmapped_modules(root: Path) -> list[str]:
    """The modules of packages_app that the README's map does not name (by file, or by their package)."""
    package = root / "packages_app"
    map_ = (package / "README.md").read_text().split("```")[1]
    named = set(re.findall(r"([\w/]+\.py)\b", map_))
    packages = set(re.findall(r"\b([\w/]+)/(?=[\s(])", map_))
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if path.name == "__init__.py" or relative.startswith(("migrations/", "management/", "templatetags/")):
            continue
        if relative not in named and not any(relative.startswith(f"{p}/") for p in packages):
            found.append(relative)
    return found


def _rooms() -> list[Path]:
    return layer_files(ROOT)


def test_the_walk_covers_every_service_and_selector_module() -> None:
    walked = _rooms()
    assert len(walked) >= 12
    for name in ("ingest.py", "queries.py", "telemetry.py", "fleet/nodes.py", "nodes/identity.py"):
        assert PACKAGE_DIR / name in walked


def test_the_readme_map_names_every_module() -> None:
    assert unmapped_modules(ROOT) == []


def test_services_selectors_and_tasks_follow_the_one_naming_habit() -> None:
    functions = [name for path in _rooms() for name, _ in public_functions(path)]
    tasks = dict(task_functions(PACKAGE_DIR / "tasks.py"))
    assert len(tasks) >= 10  # the walk found the tasks
    assert naming_violations(functions, tasks) == []


def test_no_selector_only_passes_a_call_through() -> None:
    assert [f"{p.name}: {name}" for p in _rooms() for name in passthroughs(p)] == []


def test_the_tasks_answer_to_the_names_the_broker_and_beat_know() -> None:
    from django.conf import settings

    from meshdash.celery import app
    from packages_app import tasks

    assert tasks.ingest_revision_task.name == f"{TASKS_MODULE}.ingest_revision"
    for name, _ in task_functions(PACKAGE_DIR / "tasks.py"):
        assert getattr(tasks, name).name in app.tasks
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= set(app.tasks)


# --- the controls: each rule catches the habit it forbids ----------------------------------------


@pytest.mark.parametrize(
    ("functions", "tasks", "why"),
    [
        (["node_create"], {}, "node_create: object_verb"),
        (["reports_store_batch"], {}, "reports_store_batch: object_verb"),
        (["ingest_revision"], {"ingest_revision": None}, "reuses a service's name"),
        (["open_fix"], {"open_fix_task": None}, "registered as None"),
        ([], {"catalog_task": f"{TASKS_MODULE}.catalog"}, "does not start with a verb"),
        ([], {"sync_all_task": f"{TASKS_MODULE}.sync_all"}, "there is no sync_all"),
    ],
)
def test_the_naming_rule_catches_a_planted_violation(
    functions: list[str], tasks: dict[str, str | None], why: str
) -> None:
    assert any(why in v for v in naming_violations(functions, tasks)), naming_violations(functions, tasks)


def test_the_habit_itself_passes() -> None:
    functions = ["create_node", "store_reports", "get_package", "catalog_page", "proposals_to_check"]
    tasks = {"open_fix_task": f"{TASKS_MODULE}.open_fix", "sync_all_packages": None}
    assert naming_violations([*functions, "open_fix"], tasks) == []


def test_a_planted_pass_through_selector_is_found(tmp_path: Path) -> None:
    planted = tmp_path / "selectors.py"
    planted.write_text(
        "def visible_packages(show_private):\n"
        '    """Every package this reader may see."""\n'
        "    return Package.objects.visible(show_private)\n\n\n"
        "def revision_throughput_for(revision, since=None):\n"
        "    return throughput.revision_throughput(revision.pk, since=since)\n\n\n"
        "def recent(since):\n"
        "    return Serving.objects.filter(node_key=Rollup.ALL_NODES, last_at__gte=since)\n\n\n"
        "def _own(x):\n"
        "    return other(x)\n"
    )
    assert passthroughs(planted) == ["visible_packages", "revision_throughput_for"]


def test_a_service_module_the_readme_does_not_list_is_walked_and_its_names_judged(tmp_path: Path) -> None:
    (tmp_path / "packages_app" / "nodes").mkdir(parents=True)
    (tmp_path / "packages_app" / "README.md").write_text("x\n```\nservices   ingest.py\n```\n")
    (tmp_path / "packages_app" / "ingest.py").write_text("def sync_package(x):\n    return x\n")
    (tmp_path / "packages_app" / "telemetry.py").write_text("def traces_export(x):\n    return x\n")
    walked = layer_files(tmp_path)
    assert tmp_path / "packages_app" / "telemetry.py" in walked
    functions = [name for path in walked for name, _ in public_functions(path)]
    assert naming_violations(functions, {}) == ["traces_export: object_verb; put the verb first"]
    assert unmapped_modules(tmp_path) == ["telemetry.py"]
