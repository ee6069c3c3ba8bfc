"""``manage.py rebuild_rollups``: recompute the report rollups (and who served what) from the raw reports.

For a rollup that went wrong (a bug, a restore, reports deleted by hand); safe while reports keep
arriving (rollups.rebuild.rebuild explains why). Reports older than the raw retention are gone, so their
rollups can only be kept, never rebuilt: the command refuses to rebuild a revision whose rollups
count reports older than its oldest raw report, unless told --force; pass --revision to rebuild
only some revisions.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app import judgements
from packages_app.rollups.rebuild import outliving_reports, rebuild


class Command(BaseCommand):
    help = "Recompute the report rollups (models.Rollup and models.Serving) from the raw reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--revision", type=int, action="append", help="Revision id (repeatable); default: every revision."
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Rebuild even revisions whose older raw reports are gone (their figures are lost).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        outliving = outliving_reports(options["revision"])
        if outliving and not options["force"]:
            shown = ", ".join(map(str, outliving[:10])) + (" ..." if len(outliving) > 10 else "")
            raise CommandError(
                f"{len(outliving)} revision(s) have rollups counting reports whose raw rows are gone"
                f" (dropped by MESHDASH_REPORT_RETENTION_MONTHS or deleted): {shown}. A rebuild would lose"
                " those figures; rebuild other revisions with --revision, or pass --force."
            )
        start = time.perf_counter()
        reports = rebuild(options["revision"])
        judgements.judge(None)  # what each node served was rebuilt: so is its judgement
        self.stdout.write(f"rolled up {reports} reports in {time.perf_counter() - start:.1f}s")
