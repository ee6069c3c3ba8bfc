"""`manage.py rebuild_judgements`: every node's kept judgement (packages_app.judgements) from scratch.

The rows the store, run, ingest and re-audit paths keep, written again in one transaction: after a
bulk load that bypassed them (``seed_synthetic``, a restore), or to check them.
"""

from typing import Any

from django.core.management.base import BaseCommand

from packages_app import judgements


class Command(BaseCommand):
    help = "Judge every node anew over the default window and store the rows the nodes pages read."

    def handle(self, *args: Any, **options: Any) -> None:
        count = judgements.rebuild()
        self.stdout.write(f"judged {count} nodes")
