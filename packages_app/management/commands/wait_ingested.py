"""`manage.py wait_ingested`: block until no revision is queued or running (scripts and the demo use it)."""

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app.models import Package, Revision


def finished_summary() -> str:
    """E.g. "all 12 revisions finished: 11 ingested, 1 failed (the ingest page says why)"."""
    done = Revision.objects.filter(status=Revision.Status.DONE).count()
    failed = Revision.objects.filter(status=Revision.Status.FAILED).count()
    text = f"all {done + failed} revisions finished: {done} ingested, {failed} failed"
    return text + " (the ingest page says why)" if failed else text


class Command(BaseCommand):
    help = "Wait until every known revision is done or failed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")

    def handle(self, *args: Any, **options: Any) -> None:
        deadline = time.monotonic() + options["timeout"]
        while time.monotonic() < deadline:
            pending = Revision.objects.unfinished().count()
            unsynced = Package.objects.filter(last_synced_at__isnull=True).count()
            if not pending and not unsynced:
                self.stdout.write(finished_summary())
                return
            time.sleep(1)
        self.stderr.write(f"timed out with {pending} revisions still queued or running")
        sys.exit(1)
