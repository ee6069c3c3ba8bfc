"""`manage.py discover`: track the namespaces' packages and the curated catalog's (what beat runs hourly)."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app import hub, queueing, tracking


class Command(BaseCommand):
    help = (
        "Track every package of MESHDASH_NAMESPACES (a repo holding model-package.json, whatever its name) "
        "and every package of the catalog dataset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--namespace", action="append", help="namespace (default: MESHDASH_NAMESPACES)")

    def handle(self, *args: Any, **options: Any) -> None:
        namespaces = options["namespace"] or settings.MESHDASH_NAMESPACES
        try:
            discovery = tracking.discover_packages(
                namespaces, settings.MESHDASH_CATALOG_DATASET, self._skipped
            )
        except hub.HubError as exc:
            raise CommandError(str(exc)) from exc
        for repo_id in discovery.tracked:
            queueing.enqueue_sync(repo_id)
        for repo_id in discovery.found:
            self.stdout.write(repo_id)
        self.stdout.write(f"{len(discovery.found)} packages found, {len(discovery.tracked)} newly tracked")

    def _skipped(self, repo_id: str, reason: str) -> None:
        self.stderr.write(f"skipped {repo_id!r}: {reason}")
