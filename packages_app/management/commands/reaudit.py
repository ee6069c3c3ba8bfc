"""`manage.py reaudit`: recompute the audit of every stored revision (after the audit logic changed)."""

from typing import Any

from django.core.management.base import BaseCommand

from packages_app import ingest


class Command(BaseCommand):
    help = "Recompute the capability audit of every stored revision from the stored headers (no Hub access)."

    def handle(self, *args: Any, **options: Any) -> None:
        count = ingest.reaudit_all()
        self.stdout.write(f"re-audited {count} revisions")
