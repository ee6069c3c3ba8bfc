"""``manage.py rebuild_rollups``: recompute the report rollups from the raw reports.

For a rollup that went wrong (a bug, a restore, reports deleted by hand); safe while reports keep
arriving (rollups.rebuild explains why). Reports older than the raw retention are gone, so their
rollups can only be kept, never rebuilt: pass --revision to rebuild only some revisions.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app import rollups


class Command(BaseCommand):
    help = "Recompute the report rollups (models.Rollup) from the raw reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--revision", type=int, action="append", help="Revision id (repeatable); default: every revision."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        start = time.perf_counter()
        reports = rollups.rebuild(options["revision"])
        self.stdout.write(f"rolled up {reports} reports in {time.perf_counter() - start:.1f}s")
