"""``manage.py report_partitions``: the raw reports' monthly partitions, and their upkeep on demand.

Lists the partitions (PostgreSQL) and the retention; ``--maintain`` does now what beat does daily
(packages_app.partitions.maintain): create the coming months, drop the months past the retention.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from packages_app import partitions


class Command(BaseCommand):
    help = "List the raw reports' monthly partitions; --maintain creates ahead and drops past the retention."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--maintain", action="store_true", help="Create and drop partitions now.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["maintain"]:
            upkeep = partitions.maintain()
            created, dropped = ", ".join(upkeep.created) or "none", ", ".join(upkeep.dropped) or "none"
            self.stdout.write(
                f"created {created}; dropped {dropped}; {upkeep.reports_deleted} reports"
                f" and {upkeep.keys_deleted} report keys deleted"
            )
        months = settings.MESHDASH_REPORT_RETENTION_MONTHS
        horizon = partitions.retention_horizon()
        kept = f"reports received since {horizon:%Y-%m-%d}" if horizon else "every report"
        self.stdout.write(f"retention: {months} months (MESHDASH_REPORT_RETENTION_MONTHS): {kept} kept")
        if not partitions.is_partitioned():
            self.stdout.write("the report table is not partitioned (SQLite keeps one table)")
            return
        for part in partitions.monthly_partitions():
            month = f"{part.month:%Y-%m}" if part.month else "default"
            self.stdout.write(f"{part.name:40} {month:8} ~{part.rows} rows")
