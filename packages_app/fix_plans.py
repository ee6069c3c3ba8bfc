"""What a fix pull request would carry, re-checked before anything is sent: no Hub, no writes.

``plan``: the revision's action must be "apply the patched manifest" on a package-v2 manifest, and the
revision must be the package's head: a newer revision that already has a better headline is where nodes
should move (``supersede_refusal``: "b60862a2 serves with MTP: move nodes still on c2cedfb1 to it"), and a
PR is always made from the head it improves. The patched manifest is re-audited against the revision's
stored files and headers (``stored_audit.audit_stored``) and must be admitted and improve the headline. It
yields the diff, the title and the description written for the publisher, and the headline it promises;
a refusal is a ``FixRefused`` whose sentence is for the user.

The patched manifest itself is built by the pure ``audit.fix``; the pull request is recorded and opened by
``fix_proposals`` and followed by ``fix_following``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse

from packages_app import compiled, stored_audit
from packages_app.audit import Assessment
from packages_app.audit.model import Detected, WriterShape
from packages_app.manifest import MANIFEST_FILE
from packages_app.models import Package, Revision
from packages_app.verdicts import ActionKind, Status, Verdict, improves, status_of


class FixRefused(Exception):
    """Why no pull request is (or will be) opened; the sentence is for the user."""


@dataclass(frozen=True)
class FixPlan:
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
    current = status_of(revision.headline)
    newer: list[Revision] = compiled.instances(_newer_of, package.pk, revision.committed_at)
    better = next((r for r in newer if improves(status_of(r.headline), current)), None)
    if better is not None:
        better.package = package  # as the related manager's read sets it
    return better


def _newer_of(package_id: int, committed_at: datetime) -> QuerySet[Revision]:
    """The package's revisions committed after ``committed_at``, newest first (compiled once per process:
    ``compiled.instances``)."""
    newer = Revision.objects.filter(package_id=package_id, committed_at__gt=committed_at)
    return newer.only("commit_sha", "headline", "committed_at").order_by("-committed_at", "-id")


def supersede_refusal(package: Package, revision: Revision) -> str | None:
    """Why no PR is made from ``revision`` when it is not the head: a newer, better revision, or the head."""
    return superseded_by(package, revision, find_better_revision(package, revision))


def superseded_by(package: Package, revision: Revision, better: Revision | None) -> str | None:
    """``supersede_refusal`` with ``find_better_revision``'s answer in hand (the package page shows both)."""
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


def plan(package: Package, revision: Revision) -> FixPlan:
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
    return FixPlan(package, revision, patched, diff, title, description, before, after, id_before, id_after)


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
