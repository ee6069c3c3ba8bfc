"""From finding to fix: a pull request on the Hub with a revision's patched manifest, and following it.

A service (write path; it never enqueues). The steps, each idempotent:

- ``plan`` (no Hub, no writes): the revision's action must be "apply the patched manifest" on a
  package-v2 manifest, and the revision must be the package's head: a newer revision that already has a
  better headline is where nodes should move (``supersede_refusal``: "b60862a2 serves with MTP: move nodes
  still on c2cedfb1 to it"), and a PR is always made from the head it improves. The patched manifest is
  re-audited against the revision's stored files and headers (``stored_audit.audit_stored``) and must be
  admitted and improve the headline. It yields the diff, the title and the description written for the
  publisher, and the headline it promises.
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
- ``follow_fix`` reads the PR's status back (the webhook's discussion events, beat's periodic check and an
  operator's "Sync from the Hub" call it): merged, closed without merging, reopened. ``settle_landed``
  compares the merged revision's headline, once ingested, with the promised one, and ``report_verdict``
  says it on the PR, once: what was promised, the new revision's headline, the package page's absolute URL
  (``MESHDASH_PUBLIC_URL``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from packages_app import stored_audit
from packages_app.audit import Assessment
from packages_app.audit.model import Detected, WriterShape
from packages_app.manifest import MANIFEST_FILE
from packages_app.models import FixProposal, Package, Revision
from packages_app.verdicts import ActionKind, Status, Verdict, improves, status_of

if TYPE_CHECKING:  # the Hub client loads only where a PR is sent or read (workers, the command)
    from packages_app import hub

log = logging.getLogger(__name__)

BOT_AUTHOR = "the organisation's bot account"
CLOSED_FOLLOW_DAYS = 30  # a PR closed without merging is still read back this long (it may be reopened)
OPENING_LEASE = timedelta(minutes=30)  # past the task's hard time limit: an opening proposal whose task died


class FixRefused(Exception):
    """Why no pull request is (or will be) opened; the sentence is for the user."""


@dataclass(frozen=True)
class Plan:
    package: Package
    revision: Revision
    manifest: str  # the patched model-package.json
    diff: str
    title: str
    description: str
    current: Status
    promised: Status
    package_id_before: str
    package_id_after: str


# --- the plan: what would be sent, re-checked -------------------------------------------------------


def latest_audited(package: Package, sha: str | None = None) -> Revision:
    """The revision a fix is computed from: ``sha`` (full or a prefix of 7+), else the latest."""
    if sha:
        found = (
            [r for r in package.revisions.all() if r.commit_sha.startswith(sha.lower())]
            if len(sha) >= 7
            else []
        )
        if len(found) != 1:
            raise FixRefused(
                f"{package.repo_id} has no stored revision {sha[:40]!r} (or more than one matches)."
            )
        return found[0]
    if package.latest_revision is None:
        raise FixRefused(f"{package.repo_id} has no ingested revision yet.")
    return package.latest_revision


def v1_refusal(revision: Revision) -> str | None:
    if revision.schema_version == 1:
        return (
            "This package is layer-package schema v1, which every serving load refuses: a pull request "
            "with a generation block would not make it servable. Republish it as package-v2 "
            "with mesh-llm models package, whose writer (since PR #1937) declares the MTP block where it "
            "accepts the source's layout (the revision's action says whether it does)."
        )
    return None


def find_better_revision(package: Package, revision: Revision) -> Revision | None:
    """The newest revision after ``revision`` whose headline is better: the one its nodes should move to."""
    if revision.committed_at is None:
        return None
    newer = (
        package.revisions.filter(committed_at__gt=revision.committed_at)
        .only("commit_sha", "headline", "committed_at")
        .order_by("-committed_at", "-id")
    )
    current = status_of(revision.headline)
    return next((r for r in newer if improves(status_of(r.headline), current)), None)


def supersede_refusal(package: Package, revision: Revision) -> str | None:
    """Why no PR is made from ``revision`` when it is not the head: a newer, better revision, or the head."""
    better = find_better_revision(package, revision)
    if better is not None:
        return (
            f"{better.short_sha} {status_of(better.headline).label}: move nodes still on "
            f"{revision.short_sha} to it. No pull request is made for a superseded revision."
        )
    head = package.latest_revision
    if head is not None and head.pk != revision.pk:
        return (
            f"{revision.short_sha} is not the head of {package.repo_id}: {head.short_sha} is. A pull request "
            "is made from the head it improves; propose the fix from there."
        )
    return None


def plan(package: Package, revision: Revision) -> Plan:
    """What the pull request would carry, after re-checking the patched manifest with the rulebook."""
    refusal = v1_refusal(revision) or supersede_refusal(package, revision)
    if refusal:
        raise FixRefused(refusal)
    assessment = Assessment.from_json(revision.assessment)
    if assessment is None:
        raise FixRefused(f"{revision.commit_sha[:12]} is not assessed yet; wait for its ingest.")
    action = assessment.headline.action.kind
    if action != ActionKind.APPLY_PATCH:
        raise FixRefused(
            f"{revision.commit_sha[:12]}'s action is \u201c{action.label}\u201d, not "
            f"\u201c{ActionKind.APPLY_PATCH.label}\u201d: there is no patched manifest to propose."
        )
    suggested = revision.audited.suggestion
    patched, diff = (suggested.patched_manifest, suggested.diff) if suggested else ("", "")
    if not patched or not diff:
        raise FixRefused(f"The patched manifest of {revision.commit_sha[:12]} was not stored (too large?).")
    result = stored_audit.audit_stored(revision, patched.encode())
    after = result.assessment.status if result.assessment else Status.NOT_ASSESSED
    before = assessment.status
    if result.verdict == Verdict.INVALID_MANIFEST or not result.consistent:
        codes = (
            ", ".join(sorted({p.code for p in result.problems if p.severity == "error"})) or result.verdict
        )
        raise FixRefused(f"The patched manifest does not validate ({codes}); nothing is sent.")
    if not improves(after, before):
        raise FixRefused(
            f"The patched manifest would be \u201c{after.label}\u201d, no better than "
            f"\u201c{before.label}\u201d; nothing is sent."
        )
    id_before = _package_id(revision.manifest_json)
    id_after = _package_id(_json(patched))
    title = f"Declare the MTP block in {MANIFEST_FILE} (found by meshdash)"
    description = _description(
        package,
        revision,
        result.detected,
        before,
        after,
        id_before,
        id_after,
        writer=suggested.writer if suggested else None,
    )
    return Plan(package, revision, patched, diff, title, description, before, after, id_before, id_after)


def _writer_line(shape: WriterShape | None) -> str:
    """How the description names the block's origin: the writer's own shape, or written by hand because
    the writer refuses this source (audit.fix.writer_shape; docs/rules.md section 6b)."""
    if shape is None or shape.emits:
        return "as the fixed writer (mesh-llm PR #1937) emits it for this source"
    return (
        "written by hand in the shape that writer emits: `mesh-llm models package` (PR #1937) refuses this "
        f"source ({shape.reason}), so republishing with it would not declare MTP"
    )


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _package_id(manifest: object) -> str:
    value = manifest.get("package_id") if isinstance(manifest, dict) else None
    return value if isinstance(value, str) else ""


def package_url(package: Package) -> str:
    owner, name = package.repo_id.split("/", 1)
    path = reverse("packages_app:package", args=[owner, name])
    return f"{settings.MESHDASH_PUBLIC_URL.rstrip('/')}{path}" if settings.MESHDASH_PUBLIC_URL else path


def _description(
    package: Package,
    revision: Revision,
    detected: Detected,
    before: Status,
    after: Status,
    id_before: str,
    id_after: str,
    *,
    writer: WriterShape | None = None,  # the suggestion's writer shape (audit.fix.writer_shape)
) -> str:
    blocks = [b for b in detected.blocks if b.mtp]
    arch = detected.architecture or "?"
    tensors = list(detected.expected_nextn_tensors)[:8]
    found = [
        f"- block {b.index} in `{b.file}`: {b.tensor_count} tensors ({', '.join(b.kinds)})" for b in blocks
    ]
    layer_indices = [b.index for b in blocks]
    lines = [
        f"meshdash audited revision `{revision.commit_sha}` of `{package.repo_id}`: "
        f"**{before.label}** (verdict `{revision.verdict}`).",
        "",
        "### What was found",
        "The GGUF weights hold a native MTP (NextN) block that the manifest does not declare, so nodes on "
        "the default `speculative.strategy = auto` never run it:",
        *found,
        f"- GGUF key `{arch}.nextn_predict_layers` = {detected.nextn_predict_layers}",
        f"- NextN tensors per block: {', '.join(f'`{t}`' for t in tensors) or '(none listed)'}",
        "",
        "### What this change does",
        f"- Adds `generation.speculative_decoding` to `{MANIFEST_FILE}` with the strategy `mtp` "
        f"(`native-mtp`, `prediction_depth` 1, `layer_indices` {layer_indices}) as its default, "
        f"{_writer_line(writer)}.",
        f"- Recomputes `package_id` (it binds the generation block): `{id_before or '(none)'}` → "
        f"`{id_after or '(none)'}`.",
        f"- Changes no other file: the weights stay as they are. It is made from `{revision.commit_sha}`.",
        "",
        f"With it, meshdash's audit of these weights says **{after.label}**.",
        "",
        f"Audit and evidence: {package_url(package)}?revision={revision.commit_sha}",
    ]
    return "\n".join(lines)


# --- recording and opening ------------------------------------------------------------------------------


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


# --- following ------------------------------------------------------------------------------------------

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
