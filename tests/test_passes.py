"""make test's machinery: which tests run in the services pass, per-worker Redis, the coverage gate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache

from tests import coverage_gate
from tests.passes import SQLITE_PATHS, clocks_in, runs_beside_serial, touches_a_store
from tests.settings import worker_redis_url
from tests.test_import_rules import LAYERS, ROOT
from tests.test_import_rules import PURE as PURE_LAYER


def test_a_test_needing_the_database_touches_a_store(request: pytest.FixtureRequest, db: None) -> None:
    assert touches_a_store(request.node)


def test_a_test_needing_the_database_through_its_fixtures_touches_a_store(
    request: pytest.FixtureRequest, operator: Any
) -> None:
    assert touches_a_store(request.node)


@pytest.mark.django_db
def test_a_test_marked_django_db_touches_a_store(request: pytest.FixtureRequest) -> None:
    assert touches_a_store(request.node)


def test_a_test_without_a_database_touches_none_and_runs_once(request: pytest.FixtureRequest) -> None:
    assert not touches_a_store(request.node)


def test_a_test_that_touches_no_store_may_not_use_the_cache() -> None:
    with pytest.raises(AssertionError, match=r"add @pytest.mark.cache"):
        cache.get("anything")


@pytest.mark.cache
def test_a_test_marked_cache_touches_a_store_and_may_use_the_cache(request: pytest.FixtureRequest) -> None:
    assert touches_a_store(request.node)
    cache.set("tests.test_passes", 1)
    assert cache.get("tests.test_passes") == 1
    cache.delete("tests.test_passes")


SPLIT_SUITE = """
import pytest

def test_reads_the_database(db):
    pass

@pytest.mark.cache
def test_uses_the_cache():
    pass

def test_touches_nothing():
    pass
"""


def run_split_suite(tmp_path: Path, option: str) -> str:
    (tmp_path / "test_split.py").write_text(SPLIT_SUITE)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.passes"]
    command += ["--ds=tests.settings", option, "-v", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_two_selections_split_the_suite_and_each_says_what_ran_where(tmp_path: Path) -> None:
    storeless = run_split_suite(tmp_path, "--no-store-tests")
    assert "test_touches_nothing PASSED" in storeless
    assert "test_reads_the_database" not in storeless and "test_uses_the_cache" not in storeless
    assert "1 tests that touch none ran once, here (1 passed)" in storeless
    assert "that touch a store ran" not in storeless

    store = run_split_suite(tmp_path, "--store-tests-only")
    assert "test_reads_the_database PASSED" in store and "test_uses_the_cache PASSED" in store
    assert "test_touches_nothing" not in store
    assert "2 tests that touch a store ran on SQLite (2 passed)" in store


GROUPED_SUITE = """
import os
import pytest

@pytest.mark.serial
@pytest.mark.parametrize("i", range(6))
def test_serial(i):
    print(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.xdist_group("other")
@pytest.mark.parametrize("i", range(2))
def test_mark_alone(i):
    pass

@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
"""


def passed(stdout: str, name: str) -> dict[str, str]:
    """The id of each passed test called ``name``, and the xdist worker that ran it (pytest -v:
    ``[gw0] [  8%] PASSED test_grouped.py::test_serial[0]@serial``)."""
    lines = [line.split() for line in stdout.splitlines() if f"::{name}[" in line and "PASSED" in line]
    return {words[-1]: words[0] for words in lines}


def test_the_serial_tests_run_on_one_worker_under_loadgroup(tmp_path: Path) -> None:
    """The serial tests of a pass under xdist go to one worker, one after another (the demo's tests share
    one demo): their ids carry the group loadgroup reads. The control: an xdist_group mark alone, which is
    all the serial tests had, puts no group in the id with pytest 9.2 (so xdist spread them)."""
    (tmp_path / "test_grouped.py").write_text(GROUPED_SUITE)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.passes"]\n')  # loaded as the suite's is
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ds=tests.settings"]
    command += ["-n", "2", "--dist", "loadgroup", "-v", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    serial, mark_alone = passed(done.stdout, "test_serial"), passed(done.stdout, "test_mark_alone")
    assert len(serial) == 6 and all(test.endswith("]@serial") for test in serial), done.stdout
    assert len(set(serial.values())) == 1, done.stdout
    assert len(mark_alone) == 2 and not any("@" in test for test in mark_alone), done.stdout


@pytest.mark.parametrize(
    ("url", "worker", "dbs", "expected"),
    [
        ("redis://127.0.0.1:6379/3", "", "", "redis://127.0.0.1:6379/3"),  # no xdist: unchanged
        ("redis://127.0.0.1:6379/3", "gw0", "", "redis://127.0.0.1:6379/3"),
        ("redis://127.0.0.1:6379/3", "gw1", "", "redis://127.0.0.1:6379/4"),
        ("redis://127.0.0.1:6379", "gw1", "", "redis://127.0.0.1:6379/1"),
        ("redis://127.0.0.1:6379/3", "gw1", "3,9", "redis://127.0.0.1:6379/9"),
        ("redis://:secret@cache:6380/0", "gw1", "", "redis://:secret@cache:6380/1"),
        ("filesystem://", "gw1", "", "filesystem://"),
    ],
)
def test_each_xdist_worker_gets_its_own_redis_database(
    url: str, worker: str, dbs: str, expected: str
) -> None:
    assert worker_redis_url(url, worker, dbs) == expected


def test_a_worker_past_the_listed_redis_databases_is_refused() -> None:
    with pytest.raises(RuntimeError, match="names no Redis database for xdist worker gw2"):
        worker_redis_url("redis://127.0.0.1:6379/3", "gw2", "3,9")


def coverage_report(**files: tuple[int, int]) -> dict[str, Any]:
    """coverage.py's JSON shape: path -> (covered branches, branches); every missed branch exits at line 1."""
    report: dict[str, Any] = {"files": {}}
    for path, (covered, branches) in files.items():
        summary = {
            "num_statements": 10,
            "covered_lines": 10,
            "num_branches": branches,
            "covered_branches": covered,
        }
        missing = [[1, -1]] * (branches - covered)
        report["files"][path.replace("__", "/") + ".py"] = {"summary": summary, "missing_branches": missing}
    return report


GOOD = {
    "packages_app__manifest__parse": (96, 100),
    "packages_app__manifest__v2": (100, 100),
    "packages_app__audit__judgement": (95, 100),
    "packages_app__gguf_header": (19, 20),
    "packages_app__gguf_parser": (20, 20),
    "packages_app__gguf_errors": (0, 0),
    "packages_app__gguf_fields": (10, 10),
    "packages_app__gguf_results": (4, 4),
    "packages_app__sketch": (0, 0),
    "packages_app__layout": (10, 10),
    "packages_app__verdicts": (4, 4),
    "packages_app__report_metrics": (6, 6),
    "packages_app__repo_ids": (36, 36),
    "packages_app__glossary": (6, 6),
    "packages_app__charts__layers": (70, 70),
    "packages_app__report_time": (2, 2),
    "packages_app__nodes__exposition": (52, 52),
    "packages_app__nodes__agent": (58, 58),
    "packages_app__nodes__agent_baseline": (26, 26),
    "packages_app__nodes__agent_common": (0, 0),
    "packages_app__nodes__agent_config": (30, 30),
    "packages_app__nodes__agent_observations": (80, 80),
    "packages_app__nodes__agent_runs": (40, 40),
    "packages_app__nodes__agent_spool": (24, 24),
    "packages_app__metrics": (12, 12),
    "packages_app__input_budget": (18, 18),
    "packages_app__nodes__report_schema": (75, 76),
    "packages_app__nodes__run_schema": (10, 10),
    "packages_app__nodes__otlp": (92, 92),
    "packages_app__views": (0, 50),  # not a pure module: never gated
}


def run_gate(tmp_path: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps(report))
    status = coverage_gate.main([str(path)])
    return status, capsys.readouterr().out


def test_the_gate_passes_when_every_pure_module_has_95_percent_of_its_branches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run_gate(tmp_path, coverage_report(**GOOD), capsys)
    assert status == 0 and "FAIL" not in out
    assert "packages_app/manifest/" in out and "196/200" in out


def test_the_gate_fails_a_pure_module_under_95_percent_and_names_the_branches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = coverage_report(**{**GOOD, "packages_app__sketch": (18, 20)})
    status, out = run_gate(tmp_path, report, capsys)
    assert status == 1
    assert "packages_app/sketch.py" in out and "90.0" in out and "FAIL" in out
    assert "packages_app/sketch.py:1->exit" in out


def test_a_package_is_judged_on_its_own_so_a_well_tested_one_cannot_carry_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = coverage_report(**{**GOOD, "packages_app__audit__judgement": (90, 100)})
    assert run_gate(tmp_path, report, capsys)[0] == 1


def test_a_pure_module_missing_from_the_report_fails_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = coverage_report(**{k: v for k, v in GOOD.items() if k != "packages_app__layout"})
    status, out = run_gate(tmp_path, report, capsys)
    assert status == 1 and "FAIL: not measured" in out


def pure_layer_paths() -> set[str]:
    """Every module or package the import rules put in the pure layer, as the gate names it."""
    found = set()
    for module, layer in LAYERS.items():
        if layer != PURE_LAYER:
            continue
        path = module.replace(".", "/")
        found.add(path + "/" if (ROOT / path).is_dir() else path + ".py")
    return found


def test_every_pure_module_is_gated_or_named_as_not_yet() -> None:
    named = set(coverage_gate.PURE) | set(coverage_gate.NOT_YET_GATED)
    assert pure_layer_paths() - named == set()
    assert named - pure_layer_paths() == set()  # a renamed module leaves the lists


def test_control_a_new_pure_module_in_neither_list_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coverage_gate, "PURE", tuple(p for p in coverage_gate.PURE if "charts" not in p))
    named = set(coverage_gate.PURE) | set(coverage_gate.NOT_YET_GATED)
    assert pure_layer_paths() - named == {"packages_app/charts/"}  # as nodes/exposition.py was found


# Code that asks which database it is on: it has a path of its own on SQLite.
ASKS_THE_DATABASE = re.compile(r"\.vendor\b|def as_sqlite\b")


def modules_with_a_sqlite_path(root: Path) -> set[str]:
    code = sorted((root / "packages_app").rglob("*.py"))
    return {path.relative_to(root).as_posix() for path in code if ASKS_THE_DATABASE.search(path.read_text())}


def test_every_module_with_a_sqlite_path_names_the_tests_that_run_it_there() -> None:
    """make test runs on SQLite only the store tests SQLITE_PATHS names: a module that starts asking which
    database it is on without naming its tests there would never run its SQLite path."""
    assert modules_with_a_sqlite_path(ROOT) == set(SQLITE_PATHS)
    named = {module for modules in SQLITE_PATHS.values() for module in modules}
    assert {module for module in named if not (ROOT / module).is_file()} == set()


def test_control_a_module_that_starts_asking_which_database_it_is_on_is_found(tmp_path: Path) -> None:
    (tmp_path / "packages_app").mkdir()
    (tmp_path / "packages_app" / "asks.py").write_text('if connection.vendor == "postgresql":\n    pass\n')
    (tmp_path / "packages_app" / "says.py").write_text('PREFIX = "packages_app/vendor"  # a folder\n')
    (tmp_path / "packages_app" / "compiles.py").write_text("def as_sqlite(self, compiler, connection): ...\n")
    assert modules_with_a_sqlite_path(tmp_path) == {"packages_app/asks.py", "packages_app/compiles.py"}


def collected(
    *options: str, modules: tuple[str, ...] = ("tests/test_rollups.py", "tests/test_views_api.py")
) -> set[str]:
    """The modules of the tests that pytest keeps of these modules (by default test_rollups.py and
    test_views_api.py, both all store tests) with these options."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *options]
    command += modules
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


def test_the_sqlite_pass_keeps_the_store_tests_of_the_named_modules_only() -> None:
    assert collected("--store-tests-only", "--sqlite-paths") == {"tests/test_rollups.py"}
    # The control: without the option, the PostgreSQL pass's selection keeps both.
    assert collected("--store-tests-only") == {"tests/test_rollups.py", "tests/test_views_api.py"}


def test_the_modules_beside_the_serial_tests_are_those_without_a_clock() -> None:
    """They run while the serial tests start workers and servers: neither may starve the other's deadline."""
    assert runs_beside_serial("tests/test_fleet.py")
    # The controls: a module with a thread, one that starts a worker, and one outside the repository.
    assert not runs_beside_serial("tests/test_rollups.py") and clocks_in(read("tests/test_rollups.py"))
    assert not runs_beside_serial("tests/test_tasks.py") and not runs_beside_serial(None)


def read(module: str) -> str:
    return (ROOT / module).read_text()


def test_control_a_module_with_a_deadline_or_a_sleep_is_found() -> None:
    planted = "import time\n\ndef test_x(live_server):\n    time.sleep(1)\n    assert wait(timeout=5)\n"
    assert clocks_in(planted) == ["live_server", "sleep", "timeout"]
    assert clocks_in("def test_x(db):\n    assert 1\n") == []
    assert clocks_in("import threading\n") == ["thread"]


def test_the_beside_serial_selections_split_the_store_tests_by_module() -> None:
    modules = ("tests/test_fleet.py", "tests/test_rollups.py")
    assert collected("--store-tests-only", "--beside-serial", modules=modules) == {"tests/test_fleet.py"}
    assert collected("--store-tests-only", "--not-beside-serial", modules=modules) == {
        "tests/test_rollups.py"
    }
    # The control: neither option keeps both.
    assert collected("--store-tests-only", modules=modules) == set(modules)


def test_asking_for_both_beside_serial_selections_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"]
    command += ["--beside-serial", "--not-beside-serial", "tests/test_verdicts.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "keep no test together" in done.stderr
