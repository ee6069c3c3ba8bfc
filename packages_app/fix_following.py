"""Following meshdash's fix pull requests on the Hub, once opened (``fix_proposals``).

A service (write path; it never enqueues). ``follow_fix`` reads the PR's status back (the webhook's
discussion events, beat's periodic check and an operator's "Sync from the Hub" call it): merged, closed
without merging, reopened. ``settle_landed`` compares the merged revision's headline, once ingested, with
the promised one, and ``report_verdict`` says it on the PR, once: what was promised, the new revision's
headline, the package page's absolute URL (``MESHDASH_PUBLIC_URL``). ``proposals_to_check`` is what beat
reads back; a proposal left ``opening`` past its lease (its task died) ends failed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from packages_app.audit import Assessment
from packages_app.fix_plans import package_url
from packages_app.fix_proposals import write_token
from packages_app.models import FixProposal, Revision
from packages_app.verdicts import ActionKind, status_of

if TYPE_CHECKING:  # the Hub client loads only where a PR is sent or read (workers, the command)
    from packages_app import hub

log = logging.getLogger(__name__)

CLOSED_FOLLOW_DAYS = 30  # a PR closed without merging is still read back this long (it may be reopened)
OPENING_LEASE = timedelta(minutes=30)  # past the task's hard time limit: an opening proposal whose task died

_FOLLOWED = {"merged": FixProposal.Status.MERGED, "closed": FixProposal.Status.CLOSED}


def follow_fix(proposal: FixProposal, *, writer: hub.HubWriter | None = None) -> FixProposal:
    """The PR's status from the Hub, the landed check, and meshdash's verdict on the PR once it landed."""
    proposal = refresh_fix(proposal, writer=writer)
    return report_verdict(proposal, writer=writer)


def refresh_fix(proposal: FixProposal, *, writer: hub.HubWriter | None = None) -> FixProposal:
    """The PR's status as the Hub has it now (open, merged, closed, reopened), then the landed check."""
    if proposal.pr_number is None or proposal.status not in (
        FixProposal.Status.OPEN,
        FixProposal.Status.CLOSED,
    ):
        return settle_landed(proposal)
    from packages_app import hub

    writer = writer or hub.HubWriter(proposal.package.repo_id, write_token())
    pr = writer.pull_request(proposal.pr_number)
    before, status = proposal.status, _FOLLOWED.get(pr.status, FixProposal.Status.OPEN)
    proposal.status, proposal.checked_at = status, timezone.now()
    proposal.merge_commit = pr.merge_commit or proposal.merge_commit
    proposal.author = (pr.author or proposal.author)[:150]  # the Hub's word on whose token it was
    proposal.message = _transition(proposal, before) or proposal.message
    try:
        with transaction.atomic():
            proposal.save(
                update_fields=["status", "checked_at", "merge_commit", "author", "message", "updated_at"]
            )
    except IntegrityError:  # reopened while another proposal for the same base is open: that one is followed
        proposal.status = before
        proposal.message = (
            f"PR #{proposal.pr_number} was reopened on the Hub; another proposal is open for it."
        )
        proposal.save(update_fields=["checked_at", "message", "updated_at"])
    return settle_landed(proposal)


def _transition(proposal: FixProposal, before: str) -> str:
    num, status = proposal.pr_number, proposal.status
    if status == before:
        return ""
    if status == FixProposal.Status.MERGED:
        return (
            f"PR #{num} was merged as {proposal.merge_commit[:12]}; meshdash checks it once it is ingested."
        )
    if status == FixProposal.Status.CLOSED:
        return f"PR #{num} was closed on the Hub without merging: nothing landed; a new PR may be proposed."
    return f"PR #{num} was reopened on the Hub."


def settle_landed(proposal: FixProposal) -> FixProposal:
    """Once merged and its revision audited: the headline it landed with, and whether it was promised."""
    if (
        proposal.status != FixProposal.Status.MERGED
        or not proposal.merge_commit
        or proposal.landed_revision_id
    ):
        return proposal
    landed = Revision.objects.filter(package=proposal.package, commit_sha=proposal.merge_commit).first()
    if landed is None or not landed.headline:
        return proposal
    proposal.landed_revision = landed
    proposal.landed_headline = landed.headline
    proposal.mismatch = landed.headline != proposal.promised_headline
    promised, got = status_of(proposal.promised_headline).label, status_of(landed.headline).label
    # The summary says what landed; the message says what was checked and what to look at.
    if proposal.mismatch:
        proposal.message = f"Checked on its ingest: see the audit of {landed.commit_sha[:12]} for why."
        log.warning("fix for %s landed as %s, not %s", proposal.package.repo_id, got, promised)
    else:
        proposal.message = f"Checked on the ingest of {landed.commit_sha[:12]}."
    proposal.save()
    return proposal


def settle_revision(revision_id: int) -> list[int]:
    """After a revision's ingest: settle the merged proposals that were waiting for it; their ids."""
    rev = Revision.objects.filter(pk=revision_id).first()
    if rev is None:
        return []
    waiting = FixProposal.objects.filter(
        package_id=rev.package_id, status=FixProposal.Status.MERGED, merge_commit=rev.commit_sha
    )
    return [p.pk for p in waiting if settle_landed(p).landed_revision_id]


def verdict_comment(proposal: FixProposal) -> str:
    """What meshdash says on the PR once its merge is ingested: promised, landed, and where to look."""
    landed = proposal.landed_revision
    assert landed is not None
    promised, got = status_of(proposal.promised_headline), status_of(proposal.landed_headline)
    assessment = Assessment.from_json(landed.assessment)
    action = assessment.headline.action if assessment else None
    if proposal.mismatch:
        lines = [
            f"**meshdash checked this merge: it did not land as promised.** `{proposal.package.repo_id}` "
            f"is now at `{landed.commit_sha}`, whose audit says **{got.label}**, not the "
            f"**{promised.label}** promised when this pull request was opened.",
        ]
    else:
        lines = [
            f"**meshdash checked this merge.** `{proposal.package.repo_id}` is now at `{landed.commit_sha}`, "
            f"whose audit says **{got.label}**, as promised when this pull request was opened.",
        ]
    if assessment is not None:
        lines += ["", assessment.headline.sentence]
    if action is not None and action.kind != ActionKind.NOTHING and action.text:
        lines += ["", f"What to do now: {action.text}"]
    if settings.MESHDASH_PUBLIC_URL:
        lines += ["", f"Audit and evidence: {package_url(proposal.package)}?revision={landed.commit_sha}"]
    return "\n".join(lines)


def report_verdict(proposal: FixProposal, *, writer: hub.HubWriter | None = None) -> FixProposal:
    """Comment the landed verdict on the PR, once (a claim on the row keeps two workers from both posting)."""
    if not proposal.landed_revision_id or proposal.verdict_comment_id or proposal.pr_number is None:
        return proposal
    claimed = FixProposal.objects.filter(pk=proposal.pk, verdict_comment_id="").update(
        verdict_comment_id="posting"
    )
    if not claimed:
        proposal.refresh_from_db()
        return proposal
    from packages_app import hub

    try:
        writer = writer or hub.HubWriter(proposal.package.repo_id, write_token())
        comment_id = writer.comment(proposal.pr_number, verdict_comment(proposal))
    except BaseException:
        FixProposal.objects.filter(pk=proposal.pk).update(verdict_comment_id="")  # the next check posts it
        raise
    proposal.verdict_comment_id, proposal.reported_at = comment_id, timezone.now()
    proposal.message = f"{proposal.message} meshdash said so on the pull request.".strip()
    proposal.save(update_fields=["verdict_comment_id", "reported_at", "message", "updated_at"])
    return proposal


def proposals_to_check() -> list[int]:
    """What a periodic check reads back (``followed_proposals``); opening ones whose task died end failed."""
    fail_abandoned_openings()
    return followed_proposals(FixProposal.objects.all())


def followed_proposals(proposals: QuerySet[FixProposal]) -> list[int]:
    """Of ``proposals``, the ones still followed on the Hub: open PRs, merged ones not settled or not
    reported, and PRs closed within ``CLOSED_FOLLOW_DAYS`` (they may be reopened)."""
    recent = timezone.now() - timedelta(days=CLOSED_FOLLOW_DAYS)
    followed = proposals.filter(
        Q(status=FixProposal.Status.OPEN)
        | Q(status=FixProposal.Status.MERGED, landed_revision__isnull=True)
        | Q(status=FixProposal.Status.MERGED, verdict_comment_id="")
        | Q(status=FixProposal.Status.CLOSED, updated_at__gte=recent)
    )
    return sorted(followed.values_list("pk", flat=True))


def fail_abandoned_openings() -> int:
    """Proposals still ``opening`` past ``OPENING_LEASE``: their task died (a killed worker); they end failed,
    so a new proposal for the revision may be made."""
    stuck = FixProposal.objects.filter(
        status=FixProposal.Status.OPENING, updated_at__lt=timezone.now() - OPENING_LEASE
    )
    return stuck.update(
        status=FixProposal.Status.FAILED,
        message="The worker opening this pull request never finished; nothing is known to be open. "
        "Check the Hub, and propose again if needed.",
        checked_at=timezone.now(),
    )
