"""Fix proposals: a pull request on the Hub with a revision's patched manifest (``fix_plans.plan``),
recorded, opened and kept up to date.

A service (write path; it never enqueues). The steps, each idempotent:

- ``request_fix`` records a ``FixProposal`` (status ``opening``); a second request for the same package
  and base revision returns the one already opening or open (a database constraint holds it too).
- ``open_fix`` (a task, or the command) reads the Hub's head first: when it moved past what meshdash
  last audited, it syncs and re-audits the new head, marks the proposal ``stale`` and sends nothing.
  Otherwise it plans again (the audit may have changed since) and opens one PR made from the base sha
  with the patched manifest as its only file, using the write token (``MESHDASH_HUB_WRITE_TOKEN``;
  ``HF_TOKEN`` stays read-only). When the Hub answers that the file already holds it (huggingface_hub
  makes no commit and names no PR), the proposal is ``unneeded``: nothing to change, not an error.
- ``update_fix``: while meshdash's PR is open, a new audit of its base revision that changes the patched
  manifest pushes a commit to ``refs/pr/N`` (never a second PR).

Reading the PR back once it is open: ``fix_following``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from packages_app.fix_plans import FixRefused, plan
from packages_app.manifest import MANIFEST_FILE
from packages_app.models import FixProposal, Package, Revision
from packages_app.verdicts import status_of

if TYPE_CHECKING:  # the Hub client loads only where a PR is sent or read (workers, the command)
    from packages_app import hub

log = logging.getLogger(__name__)

BOT_AUTHOR = "the organisation's bot account"


def write_token() -> str:
    return str(settings.MESHDASH_HUB_WRITE_TOKEN or "")


def author_label() -> str:
    return str(settings.MESHDASH_HUB_WRITE_AUTHOR or BOT_AUTHOR)


def active_proposal(package: Package, base_sha: str) -> FixProposal | None:
    return (
        FixProposal.objects.filter(package=package, base_sha=base_sha, status__in=FixProposal.ACTIVE)
        .order_by("-id")
        .first()
    )


def request_fix(package: Package, revision: Revision, user: Any = None) -> tuple[FixProposal, bool]:
    """The proposal for this base revision: the one opening or open, else a new one (``True``)."""
    existing = active_proposal(package, revision.commit_sha)
    if existing is not None:
        return existing, False
    if not write_token():
        raise FixRefused("No Hub write token is configured (MESHDASH_HUB_WRITE_TOKEN); nothing can be sent.")
    p = plan(package, revision)
    try:
        with transaction.atomic():
            proposal = FixProposal.objects.create(
                package=package,
                revision=revision,
                base_sha=revision.commit_sha,
                title=p.title,
                description=p.description,
                diff=p.diff,
                manifest=p.manifest,
                package_id_before=p.package_id_before,
                package_id_after=p.package_id_after,
                promised_headline=p.promised.value,
                author=author_label(),
                proposed_by=user if getattr(user, "is_authenticated", False) else None,
            )
    except IntegrityError:  # a concurrent request recorded it first: that one is the answer
        found = active_proposal(package, revision.commit_sha)
        if found is None:
            raise
        return found, False
    return proposal, True


def open_fix(
    proposal: FixProposal, *, writer: hub.HubWriter | None = None, source: hub.PackageSource | None = None
) -> FixProposal:
    """Send an ``opening`` proposal to the Hub (or find the head moved, re-audit and say so)."""
    from packages_app import hub

    if proposal.status != FixProposal.Status.OPENING:
        return proposal
    package = proposal.package
    writer = writer or hub.HubWriter(package.repo_id, write_token())
    head = writer.head()
    package.refresh_from_db()
    known = package.latest_revision.commit_sha if package.latest_revision else ""
    if head != known:
        return _stale(proposal, head, source)
    try:
        p = plan(package, proposal.revision)
    except FixRefused as exc:
        return _finish(proposal, FixProposal.Status.FAILED, str(exc))
    pr = writer.open_pull_request(
        proposal.base_sha, MANIFEST_FILE, p.manifest.encode(), p.title, p.description
    )
    if pr is None:
        message = (
            f"Nothing to change: the Hub's {MANIFEST_FILE} already is the patched one; nothing was sent."
        )
        return _finish(proposal, FixProposal.Status.UNNEEDED, message)
    proposal.status = FixProposal.Status.OPEN
    proposal.pr_number, proposal.pr_url, proposal.pr_head_sha = pr.num, pr.url, pr.head_sha or ""
    proposal.manifest, proposal.diff, proposal.promised_headline = p.manifest, p.diff, p.promised.value
    proposal.checked_at = timezone.now()
    proposal.message = f"Opened PR #{pr.num} made from {proposal.base_sha[:12]}."
    proposal.save()
    log.info("fix for %s: PR #%s opened (%s)", package.repo_id, pr.num, pr.url)
    return proposal


def _stale(proposal: FixProposal, head: str, source: hub.PackageSource | None) -> FixProposal:
    from packages_app import ingest, tracking

    repo_id = proposal.package.repo_id
    tracking.sync_package(repo_id, source)
    rev = ingest.ingest_revision(repo_id, head, source=source).revision
    label = status_of(rev.headline).label if rev.headline else "not assessed yet"
    message = (
        f"The head of {repo_id} moved to {head[:12]} since meshdash audited it: meshdash re-audited "
        f"{head[:12]} first (now \u201c{label}\u201d) and sent nothing. Review that revision and propose "
        "again if it still needs the fix."
    )
    return _finish(proposal, FixProposal.Status.STALE, message)


def record_failure(proposal: FixProposal, message: str) -> FixProposal:
    """The Hub refused the PR: nothing is open, the proposal says why (a new one may be requested)."""
    return _finish(proposal, FixProposal.Status.FAILED, f"The Hub refused the pull request: {message}")


def _finish(proposal: FixProposal, status: str, message: str) -> FixProposal:
    proposal.status, proposal.message, proposal.checked_at = status, message, timezone.now()
    proposal.save(update_fields=["status", "message", "checked_at", "updated_at"])
    return proposal


# --- updating an open pull request ------------------------------------------------------------------


def proposals_based_on(revision_id: int) -> list[int]:
    """The open proposals made from this revision: a new audit of it may change what their PR should hold."""
    sha = Revision.objects.filter(pk=revision_id).values_list("commit_sha", flat=True).first()
    return list(
        FixProposal.objects.filter(
            revision_id=revision_id, base_sha=sha or "", status=FixProposal.Status.OPEN
        ).values_list("pk", flat=True)
    )


def update_fix(proposal: FixProposal, *, writer: hub.HubWriter | None = None) -> FixProposal:
    """Push the newly audited patched manifest to the open PR's ``refs/pr/N`` (never a second PR)."""
    if proposal.status != FixProposal.Status.OPEN or proposal.pr_number is None:
        return proposal
    try:
        p = plan(proposal.package, proposal.revision)
    except FixRefused as exc:
        return _say(
            proposal, f"PR #{proposal.pr_number} is open, but the new audit proposes no change: {exc}"
        )
    if p.manifest == proposal.manifest:
        return proposal
    from packages_app import hub

    writer = writer or hub.HubWriter(proposal.package.repo_id, write_token())
    title = f"Update {MANIFEST_FILE}: meshdash's audit of {proposal.base_sha[:12]} changed"
    sha = writer.update_pull_request(
        proposal.pr_number, MANIFEST_FILE, p.manifest.encode(), title, p.description
    )
    proposal.manifest, proposal.diff, proposal.promised_headline = p.manifest, p.diff, p.promised.value
    proposal.package_id_after = p.package_id_after
    if sha is None:
        proposal.message = (
            f"PR #{proposal.pr_number} already holds the newly audited manifest: nothing to change."
        )
    else:
        proposal.pr_head_sha = sha
        proposal.message = (
            f"Pushed {sha[:12]} to PR #{proposal.pr_number}: the audit of {proposal.base_sha[:12]} changed "
            "the patched manifest."
        )
    proposal.checked_at = timezone.now()
    proposal.save()
    return proposal


def record_check_failure(proposal: FixProposal, message: str) -> FixProposal:
    """Reading the PR back failed: its status stays what it was, and the proposal says why."""
    proposal.refresh_from_db()
    return _say(proposal, f"Reading the pull request back from the Hub failed: {message}")


def _say(proposal: FixProposal, message: str) -> FixProposal:
    proposal.message, proposal.checked_at = message, timezone.now()
    proposal.save(update_fields=["message", "checked_at", "updated_at"])
    return proposal
