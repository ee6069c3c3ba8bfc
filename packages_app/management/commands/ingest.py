"""`manage.py ingest REPO_ID [--revision REV]`: ingest one revision now, in-process, with a progress bar."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from packages_app import hub, ingest, repo_ids


class Command(BaseCommand):
    help = "Ingest one revision of a package (default: the head of main) and audit it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("repo_id", help="owner/name, or its Hub URL (a /tree/REV in it is the revision)")
        parser.add_argument("--revision", help="branch, tag or commit sha (default: main)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        bar = tqdm(total=0, unit="file", disable=options["no_progress"], file=self.stderr)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        try:
            reference = repo_ids.parse_repo_reference(options["repo_id"], [settings.HF_ENDPOINT])
            revision = options["revision"] or reference.revision
            outcome = ingest.ingest_revision(reference.repo_id, revision, progress=progress)
        except (hub.HubError, repo_ids.InvalidRepoId) as exc:
            raise CommandError(str(exc)) from exc
        finally:
            bar.close()
        rev = outcome.revision
        state = rev.status if outcome.ran else f"{rev.status} (already ingested; nothing to do)"
        self.stdout.write(f"{rev.package.repo_id}@{rev.commit_sha}: {state}")
        if rev.error:
            self.stdout.write(f"error: {rev.error}")
        if rev.verdict:
            self.stdout.write(f"verdict: {rev.verdict}")
        if outcome.ran:
            self.stdout.write(f"fetched {rev.fetch_bytes} bytes in {rev.fetch_requests} requests")
