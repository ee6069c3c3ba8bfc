"""`manage.py propose_fix owner/name [--revision SHA] [--dry-run]`: open a pull request on the Hub with the
patched model-package.json of a revision whose action is "apply the patched manifest".

It prints the diff, re-checks the patched manifest with the rulebook, and opens one PR made from the
revision (never a commit to main) with the write token (MESHDASH_HUB_WRITE_TOKEN), then prints its URL.
A second run for the same revision prints the PR already open. When the Hub's head moved since meshdash
audited it, the new head is synced and audited first and nothing is sent.

Exit codes: 0 the PR is open (opened now, or already open; with --dry-run: it would be sent);
2 nothing to propose (unknown package or revision, not "apply the patched manifest", a v1 package,
a patched manifest that does not validate or does not improve the headline, no write token);
3 the head moved: re-audited, nothing sent; 4 the Hub refused or could not be reached.
"""

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from packages_app import fix_plans, fix_proposals, hub
from packages_app.models import FixProposal, Package

EXIT_REFUSED, EXIT_STALE, EXIT_HUB = 2, 3, 4


class Command(BaseCommand):
    help = "Open a pull request on the Hub with a revision's patched manifest (see docs/cli.md: propose_fix)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("repo_id", help="a tracked package, owner/name")
        parser.add_argument("--revision", help="a stored revision's sha (7+ characters); default: the latest")
        parser.add_argument(
            "--dry-run", action="store_true", help="print the diff and the PR text; send nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        repo_id = options["repo_id"]
        package = Package.objects.filter(repo_id=repo_id).select_related("latest_revision").first()
        if package is None:
            self._fail(EXIT_REFUSED, f"{repo_id[:100]} is not a stored package (track and ingest it first).")
        try:
            revision = fix_plans.latest_audited(package, options["revision"])
            existing = fix_proposals.active_proposal(package, revision.commit_sha)
            if existing is not None and existing.status == FixProposal.Status.OPEN:
                self.stdout.write(f"already open: PR #{existing.pr_number} {existing.pr_url}")
                return
            plan = fix_plans.plan(package, revision)
        except fix_plans.FixRefused as exc:
            self._fail(EXIT_REFUSED, str(exc))
        self.stdout.write(plan.diff)
        self.stdout.write(f"title: {plan.title}")
        self.stdout.write(f"author: {fix_proposals.author_label()}")
        self.stdout.write(f"promised headline: {plan.promised.label} (now {plan.current.label})")
        if options["dry_run"]:
            self.stdout.write(f"dry run: nothing sent (the PR would be made from {revision.commit_sha})")
            return
        try:
            proposal, _ = fix_proposals.request_fix(package, revision)
            proposal = fix_proposals.open_fix(proposal)
        except fix_plans.FixRefused as exc:
            self._fail(EXIT_REFUSED, str(exc))
        except hub.HubError as exc:
            if "proposal" in locals():
                fix_proposals.record_failure(proposal, str(exc))
            self._fail(EXIT_HUB, f"the Hub did not take the pull request: {exc}")
        if proposal.status == FixProposal.Status.STALE:
            self._fail(EXIT_STALE, proposal.message)
        if proposal.status != FixProposal.Status.OPEN:
            self._fail(EXIT_REFUSED, proposal.message)
        self.stdout.write(f"opened: PR #{proposal.pr_number} {proposal.pr_url}")

    def _fail(self, code: int, message: str) -> NoReturn:
        self.stderr.write(f"error: {message}")
        sys.exit(code)
