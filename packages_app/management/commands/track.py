"""`manage.py track REPO_ID`: follow a package once the Hub confirms it exists; its revisions are then synced
and ingested by the workers."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app import hub, queueing, repo_ids, tracking
from packages_app.models import TrackRequest


class Command(BaseCommand):
    help = (
        "Track a layer package repo (owner/name, or its Hub URL) once the Hub confirms it exists; its "
        "revisions are then synced and ingested."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("repo_id", help="owner/name, or https://<HF_ENDPOINT>/owner/name[/tree/REV]")

    def handle(self, *args: Any, **options: Any) -> None:
        # Not a web request: the one Hub call that confirms the repo is made here, so the answer is now.
        try:
            repo_id = repo_ids.parse_repo_reference(options["repo_id"], [settings.HF_ENDPOINT]).repo_id
            tracking.request_track(repo_id)
            package = tracking.track_checked(repo_id)
        except (repo_ids.InvalidRepoId, hub.HubError) as exc:
            raise CommandError(str(exc)) from exc
        if package is None:
            request = TrackRequest.objects.filter(repo_id=repo_id).first()
            raise CommandError(f"{repo_id} is not tracked: {request.message if request else 'refused'}")
        queueing.enqueue_sync(package.repo_id)
        self.stdout.write(f"tracking {package.repo_id}; sync enqueued")
