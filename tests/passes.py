"""The passes of `make test`: which tests touch a store, and how many ran on each database.

`make test` runs the tests that touch no store once (under coverage), and the tests that touch a store on
SQLite and then on PostgreSQL + Redis: a test that reads or writes no database and no shared cache runs the
same code either way, so running it twice costs minutes and proves nothing more. A test touches a store
when it is marked `django_db`, `services` or `cache`, or needs one of pytest-django's database fixtures
(directly or through its own fixtures). pytest-django refuses database access to any other test, so a test
that needs a database cannot be missed; the cache is not guarded that way, hence the `cache` marker, and the
check in `refuse_the_cache` below.

`--store-tests-only` keeps the tests that touch a store, `--no-store-tests` the others. At the end of a run
the terminal summary says how many tests ran on which database (under pytest-xdist, the controller counts
its workers' reports).

The store tests run whole on PostgreSQL + Redis, which is production. On SQLite (`--sqlite-paths`) only the
tests of the code that takes a path of its own there run again: SQLITE_PATHS names each module whose code
asks which database it is on (``connection.vendor``, an ``as_sqlite`` method) and the test modules that run
it. Everything else is the ORM writing the query for the database in hand, and `make run`'s demo, which is
SQLite, is started and walked page by page in the storeless pass (tests/test_make_run.py).
tests/test_passes.py fails on a module that asks and is not named here.

The store-test modules with no clock of seconds in their source (no sleep, deadline, subprocess, live server,
thread or browser: `clocks_in`) run on PostgreSQL beside the serial tests, which mostly wait on the processes
they start, rather than in the PostgreSQL pass: `--beside-serial` keeps only them, `--not-beside-serial` all
the others. The rule is read off each module's source at collection, so a module that gains a clock moves to
the PostgreSQL pass by itself. What a module's fixtures do is not read: the clocks they hold (devhub's server
thread, the Hub client's 30-second read timeout) are loose enough for a process at the lowest priority.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "django_db_setup",
        "live_server",
    }
)
STORE_MARKERS = ("django_db", "services", "cache")

# Each core module with a path of its own on SQLite, and the test modules that run that path.
SQLITE_PATHS: dict[str, tuple[str, ...]] = {
    "packages_app/partitions.py": ("tests/test_partitions.py",),
    # Its SQLite path is to do nothing, on every new connection: any store test on SQLite runs it.
    "packages_app/pgtime.py": ("tests/test_rollups.py",),
    "packages_app/web/health.py": ("tests/test_health.py",),
    "packages_app/rollups/rebuild.py": (
        "tests/test_rollups.py",
        "tests/test_public_figures.py",
        "tests/test_rollup_quartiles.py",
    ),
    # Its SQLite path: no advisory locks (SQLite has one writer at a time).
    "packages_app/rollups/quartiles.py": ("tests/test_rollup_quartiles.py", "tests/test_rollups.py"),
    "packages_app/rollups/serving.py": ("tests/test_rollups.py", "tests/test_fleet.py"),
    "packages_app/rollups/upsert.py": (
        "tests/test_rollups.py",
        "tests/test_public_figures.py",
        "tests/test_rollup_quartiles.py",
    ),
    "packages_app/seeding/seeder.py": ("tests/test_fleet.py", "tests/test_views_catalog.py"),
    "packages_app/seeding/bulk.py": ("tests/test_fleet.py", "tests/test_views_catalog.py"),
    "packages_app/fleet/sql.py": (
        "tests/test_fleet.py",
        "tests/test_fleet_registered.py",
        "tests/test_advice.py",
    ),
    "packages_app/fleet/ranking.py": ("tests/test_fleet.py", "tests/test_fleet_registered.py"),
    # Its SQLite path: the served revisions' subquery without PostgreSQL's fence (OFFSET needs a LIMIT).
    "packages_app/catalog/facets.py": ("tests/test_catalog_counts.py", "tests/test_fleet.py"),
    # Its SQLite path: the acceptance counts added up in Python, as PostgreSQL adds them up in SQL.
    "packages_app/mesh_acceptance.py": ("tests/test_mesh_acceptance.py", "tests/test_baselines.py"),
    "packages_app/speedup_cells.py": ("tests/test_speedup_sketches.py", "tests/test_baselines.py"),
    # Migrations that fill tables with SQL of each database's own, and their tests.
    "packages_app/migrations/0009_issue12_report_partitions.py": ("tests/test_partitions.py",),
    "packages_app/migrations/0022_h25_node_rollups.py": ("tests/test_rollups.py",),
    "packages_app/migrations/0023_h25_serving_sole_strategy.py": ("tests/test_rollups.py",),
    "packages_app/migrations/0032_revision_rollups.py": ("tests/test_rollups.py",),
    "packages_app/migrations/0036_plan_rollups.py": ("tests/test_rollups.py",),
    "packages_app/migrations/0042_split_rollups.py": ("tests/test_rollups.py",),
}
SQLITE_TEST_MODULES = frozenset(module for modules in SQLITE_PATHS.values() for module in modules)
ROOT = Path(__file__).resolve().parent.parent
TOUCHES_A_STORE, TOUCHES_NONE = "touches a store", "touches none"
# A clock of seconds: what makes a test's outcome depend on how busy the machine is.
CLOCK = re.compile(
    r"\bsleep\b|subprocess|Popen|live_server|monotonic|perf_counter|timeout|[Tt]hread|mark\.(serial|browser)"
)


def touches_a_store(item: pytest.Item) -> bool:
    marked = any(item.get_closest_marker(name) for name in STORE_MARKERS)
    return marked or not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-tests-only",
        action="store_true",
        help="run only the tests that touch a database or the shared cache (on SQLite, then PostgreSQL)",
    )
    parser.addoption(
        "--sqlite-paths",
        action="store_true",
        help="of the tests that touch a store, only those of the code with a SQLite path of its own "
        "(tests/passes.py, SQLITE_PATHS)",
    )
    parser.addoption(
        "--beside-serial",
        action="store_true",
        help="only the test modules that run beside the serial tests: those with no clock in their source "
        "(tests/passes.py, clocks_in)",
    )
    parser.addoption(
        "--not-beside-serial",
        action="store_true",
        help="all but the test modules that run beside the serial tests (tests/passes.py, clocks_in)",
    )
    parser.addoption(
        "--no-store-tests",
        action="store_true",
        help="run only the tests that touch no store (make test runs them once, under coverage)",
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("serial"):  # under xdist, one after another on one worker
            item.add_marker(pytest.mark.xdist_group("serial"))
            if getattr(config.option, "loadgroup", False):
                send_to_one_worker(item, "serial")
        store = touches_a_store(item)
        item.user_properties.append(("store", TOUCHES_A_STORE if store else TOUCHES_NONE))
        refused = "no_store_tests" if store else "store_tests_only"
        wanted = not config.getoption(refused)
        if store and config.getoption("sqlite_paths"):
            wanted = wanted and runs_a_sqlite_path(item)
        if config.getoption("beside_serial") or config.getoption("not_beside_serial"):
            wanted = wanted and runs_beside_serial(module_of(Path(item.path))) == config.getoption(
                "beside_serial"
            )
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def runs_a_sqlite_path(item: pytest.Item) -> bool:
    """Whether the test's module is one that SQLITE_PATHS names."""
    return named_for_sqlite(Path(item.path))


def module_of(path: Path) -> str | None:
    """The test module's path in the repository (``tests/test_x.py``), None for a suite outside it
    (tests/test_passes.py plants some)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def clocks_in(source: str) -> list[str]:
    """The clocks of seconds a test module's source names, each once, sorted."""
    return sorted({found.group(0) for found in CLOCK.finditer(source)})


@functools.cache
def runs_beside_serial(module: str | None) -> bool:
    """Whether `make test` runs this test module's PostgreSQL tests beside the serial tests: a module of the
    repository (``tests/test_x.py``) whose source names no clock."""
    return module is not None and not clocks_in((ROOT / module).read_text())


def named_for_sqlite(path: Path) -> bool:
    return module_of(path) in SQLITE_TEST_MODULES


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --sqlite-paths or --beside-serial, the test modules not named are not even imported: collecting
    the whole suite takes about ten seconds of a process."""
    selective = config.getoption("sqlite_paths") or config.getoption("beside_serial")
    if not selective or collection_path.is_dir():
        return None
    if not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"):
        return None
    if config.getoption("sqlite_paths") and not named_for_sqlite(collection_path):
        return True
    if config.getoption("beside_serial") and not runs_beside_serial(module_of(collection_path)):
        return True
    return None


def send_to_one_worker(item: pytest.Item, group: str) -> None:
    """Name the test ``<id>@<group>``, which --dist loadgroup sends to one worker with the rest of its group.

    pytest-xdist 3.8 does it for an xdist_group mark by writing ``item._nodeid``, which pytest 9.2 no
    longer reads (a node's id is now ``item._id``): the mark alone was silently ignored, and the serial
    tests were spread over the workers (the demo's six tests started a demo on each). Named here the way
    pytest reads it.
    """
    grouped = f"{item.nodeid}@{group}"
    if hasattr(item, "_id") and not item.nodeid.endswith(f"@{group}"):
        item._id = type(item._id).parse(grouped)


CACHE_OPERATIONS = (
    "add", "get", "set", "touch", "delete", "get_many", "has_key", "incr", "decr",
    "set_many", "delete_many", "clear", "get_or_set",
)  # fmt: skip


@pytest.fixture(autouse=True)
def refuse_the_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test classed as touching no store must not use Django's cache either: in the PostgreSQL pass the
    cache is Redis, and such a test would never run against it. It fails naming the marker to add. Only the
    operations are refused: Django itself closes the caches after every request."""
    if touches_a_store(request.node):
        yield
        return
    from django.core.cache import caches

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(
            f"{request.node.nodeid} uses Django's cache but is not marked: add "
            "@pytest.mark.cache so that it also runs against Redis in the services pass"
        )

    for backend in {type(caches[alias]) for alias in caches}:
        for name in CACHE_OPERATIONS:
            monkeypatch.setattr(backend, name, refused)
    yield


class Tally:
    """Outcomes per class of test, from the reports (a worker's reports reach the controller too)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Counter[str]] = {TOUCHES_A_STORE: Counter(), TOUCHES_NONE: Counter()}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            store = dict(report.user_properties).get("store", TOUCHES_NONE)
            self.outcomes[str(store)][report.outcome] += 1

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        database = database_name()
        store, none = self.outcomes[TOUCHES_A_STORE], self.outcomes[TOUCHES_NONE]
        parts = []
        if store or not none:
            ran = f"{sum(store.values())} tests that touch a store ran on {database}"
            parts.append(f"{ran} ({_outcomes(store)})")
        if none:
            parts.append(f"{sum(none.values())} tests that touch none ran once, here ({_outcomes(none)})")
        terminalreporter.write_sep("-", "; ".join(parts))


def _outcomes(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "none"


def database_name() -> str:
    from django.conf import settings
    from django.db import connection

    names = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    cache = settings.CACHES["default"]["BACKEND"]
    return names.get(connection.vendor, connection.vendor) + (" + Redis" if "redis" in cache.lower() else "")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("beside_serial") and config.getoption("not_beside_serial"):
        raise pytest.UsageError("--beside-serial and --not-beside-serial keep no test together: choose one")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) counts
        config.pluginmanager.register(Tally(), "meshdash-tally")
