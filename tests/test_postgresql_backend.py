"""The suite's PostgreSQL backend (tests/postgresql_backend): its flush, DELETE in place of Django's
TRUNCATE, empties every table whatever references what, and keeps TRUNCATE where a flush resets sequences."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection

from tests import dashboard_factories as f

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the suite's own backend is PostgreSQL's; SQLite keeps Django's"
)


@pytest.mark.django_db(transaction=True)
def test_the_flush_empties_every_table_of_rows_that_reference_each_other() -> None:
    assert type(connection.ops).__module__ == "tests.postgresql_backend.base"
    f.qwen35_fleet(datetime.now(UTC))  # packages, revisions, files, nodes, reports, rollups
    user = User.objects.create_user("operator")
    user.groups.add(Group.objects.create(name="testers"))  # a row referencing two tables
    models = [m for m in apps.get_models(include_auto_created=True) if m._meta.managed and not m._meta.proxy]
    filled = {m._meta.db_table for m in models if m.objects.exists()}
    assert {"packages_app_revision", "packages_app_report", "packages_app_node", "auth_user_groups"} <= filled

    call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True)

    assert [m._meta.db_table for m in models if m.objects.exists()] == []


@pytest.mark.django_db  # the suite's database, and so the PostgreSQL pass
def test_the_flush_deletes_and_a_flush_that_resets_the_sequences_truncates() -> None:
    tables = ["packages_app_package", "packages_app_revision"]
    assert connection.ops.sql_flush(no_style(), tables) == [
        'DELETE FROM "packages_app_package";',
        'DELETE FROM "packages_app_revision";',
    ]
    (truncate,) = connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    assert truncate.startswith("TRUNCATE") and "RESTART IDENTITY" in truncate
    (cascade,) = connection.ops.sql_flush(no_style(), tables, allow_cascade=True)
    assert cascade.startswith("TRUNCATE") and cascade.rstrip(";").endswith("CASCADE")
