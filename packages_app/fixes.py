"""From finding to fix: a pull request on the Hub with a revision's patched manifest, and following it.

A service (write path; it never enqueues). Three steps, each idempotent:

- ``plan`` (no Hub, no writes): the revision's action must be "apply the patched manifest" on a
  package-v2 manifest; the patched manifest is re-audited against the revision's stored files and
  headers (``stored_audit.audit_stored``) and must be admitted and improve the headline. It yields the diff,
  the title and the description written for the publisher, and the headline it promises.
- ``request_fix`` records a ``FixProposal`` (status ``opening``); a second request for the same package
  and base revision returns the one already opening or open (a database constraint holds it too).
- ``open_fix`` (a task, or the command) reads the Hub's head first: when it moved past what meshdash
  last audited, it syncs and re-audits the new head, marks the proposal ``stale`` and sends nothing.
  Otherwise it plans again (the audit may have changed since) and opens one PR made from the base sha
  with the patched manifest as its only file, using the write token (``MESHDASH_HUB_WRITE_TOKEN``;
  ``HF_TOKEN`` stays read-only).
- ``refresh_fix`` reads the PR's status back (the webhook's discussion events and a periodic check call
  it); ``settle_landed`` compares the merged revision's headline, once ingested, with the promised one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from packages_app import stored_audit
from packages_app.audit import Assessment
from packages_app.audit.model import WriterShape
from packages_app.manifest import MANIFEST_FILE
from packages_app.models import FixProposal, Package, Revision
from packages_app.verdicts import ActionKind, Status, improves, status_of

if TYPE_CHECKING:  # the Hub client loads only where a PR is sent or read (workers, the command)
    from packages_app import hub

log = logging.getLogger(__name__)

BOT_AUTHOR = "the organisation's bot account"


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


def plan(package: Package, revision: Revision) -> Plan:
    """What the pull request would carry, after re-checking the patched manifest with the rulebook."""
    refusal = v1_refusal(revision)
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
    suggested = (revision.audit or {}).get("suggested_generation") or {}
    patched, diff = suggested.get("patched_manifest"), suggested.get("diff")
    if not isinstance(patched, str) or not isinstance(diff, str) or not diff:
        raise FixRefused(f"The patched manifest of {revision.commit_sha[:12]} was not stored (too large?).")
    result = stored_audit.audit_stored(revision, patched.encode())
    after = result.assessment.status if result.assessment else Status.NOT_ASSESSED
    before = assessment.status
    if result.verdict == "invalid-manifest" or not result.consistent:
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
        result.to_json(),
        before,
        after,
        id_before,
        id_after,
        writer=suggested.get("writer"),
    )
    return Plan(package, revision, patched, diff, title, description, before, after, id_before, id_after)


def _writer_line(writer: object) -> str:
    """How the description names the block's origin: the writer's own shape, or written by hand because
    the writer refuses this source (audit.fix.writer_shape; docs/rules.md section 6b)."""
    shape = WriterShape.from_json(writer)
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
    audit: dict[str, object],
    before: Status,
    after: Status,
    id_before: str,
    id_after: str,
    *,
    writer: object = None,  # the suggestion's writer shape (audit.fix.writer_shape), as stored
) -> str:
    detected = audit.get("detected") if isinstance(audit.get("detected"), dict) else {}
    assert isinstance(detected, dict)
    blocks = [b for b in detected.get("blocks") or [] if isinstance(b, dict) and b.get("mtp")]
    arch = detected.get("architecture") or "?"
    tensors = [str(t) for t in detected.get("expected_nextn_tensors") or []][:8]
    found = [
        f"- block {b.get('index')} in `{b.get('file')}`: {b.get('tensor_count')} tensors "
        f"({', '.join(str(k) for k in b.get('kinds') or [])})"
        for b in blocks
    ]
    layer_indices = [b.get("index") for b in blocks]
    lines = [
        f"meshdash audited revision `{revision.commit_sha}` of `{package.repo_id}`: "
        f"**{before.label}** (verdict `{revision.verdict}`).",
        "",
        "### What was found",
        "The GGUF weights hold a native MTP (NextN) block that the manifest does not declare, so nodes on "
        "the default `speculative.strategy = auto` never run it:",
        *found,
        f"- GGUF key `{arch}.nextn_predict_layers` = {detected.get('nextn_predict_layers')}",
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
    proposal.status = FixProposal.Status.OPEN
    proposal.pr_number, proposal.pr_url, proposal.pr_head_sha = pr.num, pr.url, pr.head_sha or ""
    proposal.manifest, proposal.diff, proposal.promised_headline = p.manifest, p.diff, p.promised.value
    proposal.checked_at = timezone.now()
    proposal.message = f"Opened PR #{pr.num} made from {proposal.base_sha[:12]}."
    proposal.save()
    log.info("fix for %s: PR #%s opened (%s)", package.repo_id, pr.num, pr.url)
    return proposal


def _stale(proposal: FixProposal, head: str, source: hub.PackageSource | None) -> FixProposal:
    from packages_app import ingest

    repo_id = proposal.package.repo_id
    ingest.sync_package(repo_id, source)
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


# --- following ------------------------------------------------------------------------------------------


def refresh_fix(proposal: FixProposal, *, writer: hub.HubWriter | None = None) -> FixProposal:
    """The PR's status as the Hub has it now (open, merged, closed), then the landed check."""
    if proposal.pr_number is None or proposal.status not in (
        FixProposal.Status.OPEN,
        FixProposal.Status.CLOSED,
    ):
        return settle_landed(proposal)
    from packages_app import hub

    writer = writer or hub.HubWriter(proposal.package.repo_id, write_token())
    pr = writer.pull_request(proposal.pr_number)
    status = {"merged": FixProposal.Status.MERGED, "closed": FixProposal.Status.CLOSED}.get(
        pr.status, FixProposal.Status.OPEN
    )
    proposal.status, proposal.checked_at = status, timezone.now()
    proposal.merge_commit = pr.merge_commit or proposal.merge_commit
    proposal.author = (pr.author or proposal.author)[:150]  # the Hub's word on whose token it was
    proposal.save(update_fields=["status", "checked_at", "merge_commit", "author", "updated_at"])
    return settle_landed(proposal)


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
    if proposal.mismatch:
        promised, got = status_of(proposal.promised_headline).label, status_of(landed.headline).label
        proposal.message = (
            f"Merged, but the new revision is \u201c{got}\u201d, not the promised \u201c{promised}\u201d."
        )
        log.warning("fix for %s landed as %s, not %s", proposal.package.repo_id, got, promised)
    else:
        proposal.message = (
            f"Merged; {landed.commit_sha[:12]} is \u201c{status_of(landed.headline).label}\u201d as promised."
        )
    proposal.save()
    return proposal


def settle_revision(revision_id: int) -> int:
    """After a revision's ingest: settle the merged proposals that were waiting for it."""
    rev = Revision.objects.filter(pk=revision_id).first()
    if rev is None:
        return 0
    waiting = FixProposal.objects.filter(
        package_id=rev.package_id, status=FixProposal.Status.MERGED, merge_commit=rev.commit_sha
    )
    return sum(1 for p in waiting if settle_landed(p).landed_revision_id)


def proposals_to_check() -> list[int]:
    """The proposals a periodic check reads back: open ones, and merged ones not settled."""
    return list(
        FixProposal.objects.filter(status=FixProposal.Status.OPEN).values_list("pk", flat=True)
    ) + list(
        FixProposal.objects.filter(
            status=FixProposal.Status.MERGED, landed_revision__isnull=True
        ).values_list("pk", flat=True)
    )


def proposals_for_pr(repo_id: str, number: int) -> list[int]:
    return list(
        FixProposal.objects.filter(package__repo_id=repo_id, pr_number=number).values_list("pk", flat=True)
    )
