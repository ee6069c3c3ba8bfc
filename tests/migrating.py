"""Moving the test database's schema to a migration and back, for tests of data migrations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> Any:
    """Migrate to ``targets``; returns the historical apps there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def back_to_the_leaf() -> Iterator[None]:
    yield
    graph = MigrationExecutor(connection).loader.graph
    migrate(graph.leaf_nodes("packages_app"))  # the other tests of the session expect the full schema
