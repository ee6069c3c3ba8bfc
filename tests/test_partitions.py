"""Raw reports by month: partitions made ahead, old months dropped, exactly-once kept by ReportKey.

PostgreSQL partitions the report table (migration 0009); SQLite keeps one table, where the
retention deletes rows instead. Either way the rollups, which the pages read, keep every figure.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum

from packages_app import partitions, reports, tasks
from packages_app.models import Node, Package, Report, ReportKey, Revision, Rollup
from packages_app.partitions import month_start
from tests.migrating import back_to_the_leaf, migrate  # noqa: F401 (a fixture)
from tests.test_rollups import REPO, SHA, body, node, valid

POSTGRES = connection.vendor == "postgresql"
NOW = datetime(2026, 12, 15, 12, tzinfo=UTC)
needs_postgres = pytest.mark.skipif(not POSTGRES, reason="SQLite keeps one report table")


@pytest.fixture
def revision() -> Revision:
    package = Package.objects.create(repo_id=REPO, private=False)
    return Revision.objects.create(package=package, commit_sha=SHA, mtp_detected=True)


def store(count: int, at: datetime, seed: int) -> list[reports.StoreOutcome]:
    rng = random.Random(seed)
    sender = Node.objects.filter(name="node-a").first() or node("node-a")
    return reports.store_reports(sender, [valid(body(rng)) for _ in range(count)], at)


def partition_of(report_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM packages_app_report WHERE id = %s", [report_id])
        return str(cursor.fetchone()[0])


def rolled_up(revision: Revision) -> int:
    cells = Rollup.objects.filter(revision=revision, grain="total", node_key=0)
    return int(cells.aggregate(n=Sum("reports"))["n"] or 0)


@needs_postgres
@pytest.mark.django_db
def test_the_report_table_is_partitioned_by_month_with_months_made_ahead(revision: Revision) -> None:
    assert partitions.is_partitioned()
    months = [part.month for part in partitions.monthly_partitions() if part.month]
    this_month = month_start(datetime.now(UTC))
    assert [month_start(this_month, ahead) for ahead in range(3)] == months[-3:]
    (created,) = store(1, datetime.now(UTC), seed=1)
    assert partition_of(created.id) == partitions.partition_name(this_month)


@needs_postgres
@pytest.mark.django_db
def test_a_month_without_a_partition_goes_to_the_default_and_moves_when_its_month_is_made(
    revision: Revision,
) -> None:
    far = datetime(2031, 7, 9, tzinfo=UTC)
    outcomes = store(3, far, seed=2)
    ids = [outcome.id for outcome in outcomes]
    assert {partition_of(pk) for pk in ids} == {partitions.DEFAULT}

    assert partitions.create_months(far, far) == ["packages_app_report_p2031_07"]

    assert {partition_of(pk) for pk in ids} == {"packages_app_report_p2031_07"}
    assert Report.objects.filter(id__in=ids).count() == 3
    assert partitions.create_months(far, far) == []  # idempotent


@pytest.mark.django_db
def test_a_replay_in_a_later_month_is_a_duplicate_because_its_key_is_kept(revision: Revision) -> None:
    rng = random.Random(3)
    item = valid(body(rng))
    sender = node("node-a")
    first = reports.store_report(sender, item, NOW - timedelta(days=40))
    again = reports.store_report(sender, item, NOW)
    assert (first.result, again.result, again.id) == (
        reports.Stored.CREATED,
        reports.Stored.DUPLICATE,
        first.id,
    )
    assert Report.objects.count() == 1 and rolled_up(revision) == 1

    # Control: without its key, the same replay is stored a second time (a partitioned table's
    # unique index cannot hold (node, report_id) across months; the key table does).
    ReportKey.objects.all().delete()
    assert reports.store_report(sender, item, NOW).result is reports.Stored.CREATED
    assert Report.objects.count() == 2


@pytest.mark.django_db
def test_months_past_the_retention_are_dropped_and_the_rollups_keep_their_figures(
    revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_REPORT_RETENTION_MONTHS = 2
    old_at, new_at = NOW - timedelta(days=120), NOW - timedelta(days=1)
    if POSTGRES:
        partitions.create_months(old_at, NOW)
    old, new = store(10, old_at, seed=4), store(5, new_at, seed=5)
    assert rolled_up(revision) == 15

    upkeep = partitions.maintain(NOW)

    assert set(Report.objects.values_list("id", flat=True)) == {o.id for o in new}
    assert set(ReportKey.objects.values_list("id", flat=True)) == {o.id for o in new}
    assert rolled_up(revision) == 15  # the pages' figures stay
    if POSTGRES:
        assert partitions.partition_name(month_start(old_at)) in upkeep.dropped
        kept = {part.month for part in partitions.monthly_partitions()}
        assert month_start(old_at) not in kept and month_start(new_at) in kept
    else:
        assert upkeep.reports_deleted == len(old)
    assert partitions.maintain(NOW).dropped == []  # idempotent


@pytest.mark.django_db
def test_no_retention_keeps_every_month(revision: Revision, settings: Any) -> None:
    settings.MESHDASH_REPORT_RETENTION_MONTHS = 0
    if POSTGRES:
        partitions.create_months(NOW - timedelta(days=400), NOW)
    store(4, NOW - timedelta(days=400), seed=6)
    upkeep = partitions.maintain(NOW)
    assert (upkeep.dropped, upkeep.reports_deleted, Report.objects.count()) == ([], 0, 4)


@pytest.mark.django_db
def test_rebuild_rollups_refuses_to_lose_the_figures_of_dropped_months(
    revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_REPORT_RETENTION_MONTHS = 2
    if POSTGRES:
        partitions.create_months(NOW - timedelta(days=120), NOW)
    store(10, NOW - timedelta(days=120), seed=7)
    store(5, NOW - timedelta(days=1), seed=8)
    call_command("rebuild_rollups", stdout=StringIO())  # control: every raw report is there
    assert rolled_up(revision) == 15

    partitions.maintain(NOW)

    with pytest.raises(CommandError, match=rf"1 revision\(s\) .* gone .*: {revision.pk}\. "):
        call_command("rebuild_rollups", stdout=StringIO())
    assert rolled_up(revision) == 15
    call_command("rebuild_rollups", force=True, stdout=StringIO())
    assert rolled_up(revision) == 5


@pytest.mark.django_db
def test_the_daily_task_is_scheduled_and_reports_what_it_did(settings: Any) -> None:
    schedule = django_settings.CELERY_BEAT_SCHEDULE["maintain-report-partitions"]
    assert schedule["task"] == "packages_app.tasks.maintain_report_partitions"
    settings.MESHDASH_REPORT_RETENTION_MONTHS = 0
    ahead = partitions.partition_name(month_start(datetime.now(UTC), 2))
    if POSTGRES:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {ahead}")
    result = tasks.maintain_report_partitions()
    assert result["created"] == ([ahead] if POSTGRES else [])
    assert tasks.maintain_report_partitions()["created"] == []


# --- the migration -----------------------------------------------------------------------------

BEFORE = [("packages_app", "0008_rollup12_raw_reports_need_no_covering_index")]
AFTER = [("packages_app", "0009_issue12_report_partitions")]


def is_partitioned_table() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'packages_app_report'::regclass")
        return cursor.fetchone() is not None


def old_report(apps: Any, node: Any, report_id: str, at: datetime) -> Any:
    return apps.get_model("packages_app", "Report").objects.create(
        node_id=node.pk,
        report_id=report_id,
        body_sha256="a" * 64,
        received_at=at,
        observed_at=at,
        repo_id=REPO,
        body={},
    )


@needs_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_the_migration_moves_every_report_into_months_and_back() -> None:
    apps = migrate(BEFORE)
    sender = apps.get_model("packages_app", "Node").objects.create(name="n", token_hash="h" * 64)
    dates = [datetime(2025, 3, 4, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC), datetime.now(UTC)]
    made = [
        old_report(apps, sender, f"00000000-0000-4000-8000-00000000000{i}", at) for i, at in enumerate(dates)
    ]

    apps = migrate(AFTER)

    assert is_partitioned_table()
    assert [partition_of(r.pk) for r in made] == [
        "packages_app_report_p2025_03",
        "packages_app_report_p2026_11",
        partitions.partition_name(month_start(datetime.now(UTC))),
    ]
    keys = apps.get_model("packages_app", "ReportKey").objects.order_by("id")
    assert [(k.id, str(k.report_id)) for k in keys] == [(r.pk, str(r.report_id)) for r in made]
    new_key = keys.create(
        node_id=sender.pk,
        report_id="00000000-0000-4000-8000-0000000000ff",
        body_sha256="b" * 64,
        received_at=datetime.now(UTC),
    )
    assert new_key.id > max(r.pk for r in made)  # the key sequence continues after the reports' ids

    apps = migrate(BEFORE)

    assert not is_partitioned_table()
    old_model = apps.get_model("packages_app", "Report")
    assert sorted(old_model.objects.values_list("id", flat=True)) == sorted(r.pk for r in made)
    again = old_report(apps, sender, "00000000-0000-4000-8000-0000000000aa", datetime.now(UTC))
    assert again.pk > max(r.pk for r in made)  # ids come from the table's identity again
    with pytest.raises(IntegrityError), transaction.atomic():
        old_report(apps, sender, str(made[0].report_id), datetime.now(UTC))  # (node, report_id) unique again
