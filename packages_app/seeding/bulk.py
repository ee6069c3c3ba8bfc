"""Writing seeded rows by the thousand: batches for bulk_create, reports by COPY (PostgreSQL) or in batches,
report ids reserved ahead, the reports' exactly-once keys made from their rows and the runs their nodes'
agents would have registered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

from packages_app.models import NodeRun, Report, ReportKey
from packages_app.seeding.rows import REPORT_COLUMNS, SyntheticReport

T = TypeVar("T", bound=Model)


def batched(items: Iterator[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class BulkLoader:
    """Reports by bulk_create, in batches."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.rows: list[SyntheticReport] = []
        self.total = 0

    def __enter__(self) -> BulkLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()

    def add(self, row: SyntheticReport) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        Report.objects.bulk_create([Report(**_report_fields(row)) for row in self.rows])
        self.total += len(self.rows)
        self.rows = []


class CopyLoader:
    """PostgreSQL: reports streamed into the table by COPY as they are made."""

    def __init__(self) -> None:
        self.total = 0
        self.stack = ExitStack()

    def __enter__(self) -> CopyLoader:
        cursor = self.stack.enter_context(connection.cursor())
        reports = f"COPY {Report._meta.db_table} ({', '.join(REPORT_COLUMNS)}) FROM STDIN"
        self.copy = self.stack.enter_context(cursor.cursor.copy(reports))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.__exit__(*exc)  # type: ignore[arg-type]

    def add(self, row: SyntheticReport) -> None:
        self.copy.write_row([getattr(row, name) for name in REPORT_COLUMNS])
        self.total += 1


def reserve_report_ids(count: int) -> int:
    """The first of ``count`` consecutive report (and report key) ids no writer will take."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [ReportKey._meta.db_table])
            (sequence,) = cursor.fetchone()
            cursor.execute("SELECT nextval(%s)", [sequence])
            (first,) = cursor.fetchone()
            cursor.execute("SELECT setval(%s, %s)", [sequence, first + max(count, 1) - 1])
        return int(first)
    last = ReportKey.objects.order_by("-id").values_list("id", flat=True).first() or 0
    return last + 1


def register_reporting_runs(first_id: int, next_id: int) -> int:
    """A run for each (node, revision) the seeded reports name, as their agents would have registered
    it, so the reports count in the public figures (rollups.public_weight.registered_pairs); returns how
    many."""
    pairs = (
        Report.objects.filter(id__gte=first_id, id__lt=next_id)
        .values_list("node_id", "revision_id", "repo_id", "commit_sha")
        .distinct()
        .order_by()
    )
    runs = [
        NodeRun(
            node_id=node, run_id=f"seed-{node}-{revision}", revision_id=revision, repo_id=repo, commit_sha=sha
        )
        for node, revision, repo, sha in pairs
    ]
    NodeRun.objects.bulk_create(runs, ignore_conflicts=True)
    return len(runs)


def add_report_keys(first_id: int, end_id: int) -> None:
    """The exactly-once keys of the reports just made (ids first_id to end_id - 1), from their rows."""
    columns = "id, node_id, report_id, body_sha256, received_at"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {ReportKey._meta.db_table} ({columns}) SELECT {columns}"  # noqa: S608
            f" FROM {Report._meta.db_table} WHERE id >= %s AND id < %s",
            [first_id, end_id],
        )


def _report_fields(row: SyntheticReport) -> dict[str, Any]:
    values = {name: getattr(row, name) for name in REPORT_COLUMNS}
    values["body"] = json.loads(row.body)
    values["timings_flagged"] = []
    return values
