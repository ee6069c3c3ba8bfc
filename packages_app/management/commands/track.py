"""`manage.py track REPO_ID`: follow a package; its revisions are synced and ingested by the workers."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app import hub, ingest, queueing


class Command(BaseCommand):
    help = "Track a layer package repo (owner/name); its revisions are then synced and ingested."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("repo_id")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            package = ingest.track_package(options["repo_id"])
        except hub.HubError as exc:
            raise CommandError(str(exc)) from exc
        queueing.enqueue_sync(package.repo_id)
        self.stdout.write(f"tracking {package.repo_id}; sync enqueued")
