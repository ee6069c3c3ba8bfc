"""Service and selectors for mesh-llm's `models certify` reports (audit.certify_report; docs/rules.md section
6b): store one report once (keyed by its canonical digest), whatever revision it names; read the reports of a
revision by the manifest bytes they tested, and the reports meshdash does not track (kept and listed, never
dropped). ``import_certify`` and ``POST /api/v1/certify-reports`` store through here."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet

from packages_app import compiled
from packages_app.audit.certify_report import CertifyReport as Parsed
from packages_app.audit.certify_report import parse_certify_report
from packages_app.models import CertifyReport, Package, Revision

UNTRACKED_LIMIT = 100


@dataclass(frozen=True)
class StoredCertify:
    report: CertifyReport
    created: bool  # False: this exact report was already stored
    revision: Revision | None  # the newest revision holding the bytes it tested; None: not tracked


def store_certify_report(data: bytes | Any, *, certified_by: str, via: str, now: datetime) -> StoredCertify:
    """Validate and store one report (CertifyReportError on a malformed one: nothing is stored)."""
    parsed = parse_certify_report(data)  # bytes that parse are JSON, so loads cannot fail below
    body = json.loads(data) if isinstance(data, bytes | bytearray) else data
    row, created = _get_or_create(parsed, body, certified_by, via, now)
    return StoredCertify(row, created, tracked_revision(row.manifest_sha256))


def _get_or_create(
    parsed: Parsed, body: Any, certified_by: str, via: str, now: datetime
) -> tuple[CertifyReport, bool]:
    fields = {
        "manifest_sha256": parsed.manifest_sha256,
        "status": parsed.status,
        "failed_gate": parsed.failed_gate[:100],
        "summary": parsed.summary()[:300],
        "model_id": parsed.model_id[:300],
        "resolved_package_ref": parsed.resolved_package_ref[:500],
        "layer_count": parsed.layer_count,
        "certified_by": certified_by[:150],
        "via": via,
        "received_at": now,
        "body": body,
    }
    try:
        with transaction.atomic():
            return CertifyReport.objects.get_or_create(digest=parsed.digest, defaults=fields)
    except IntegrityError:  # another upload of the same report won the race
        return CertifyReport.objects.get(digest=parsed.digest), False


def tracked_revision(manifest_sha256: str) -> Revision | None:
    """The newest stored revision whose manifest bytes are the ones a report tested."""
    revisions = Revision.objects.filter(manifest_sha256=manifest_sha256).select_related("package")
    return revisions.order_by("-committed_at", "-id").first()


def revision_certify_reports(revision: Revision) -> list[CertifyReport]:
    """The reports for this revision's exact manifest bytes, newest first (one query)."""
    if not revision.manifest_sha256:
        return []
    return compiled.instances(_reports_of, [revision.manifest_sha256])


def _reports_of(digests: Sequence[str]) -> QuerySet[CertifyReport]:
    """The newest 20 reports of these manifest digests (one digest bound as a list: ``compiled.instances``
    compiles a plain text into its SQL)."""
    return CertifyReport.objects.filter(manifest_sha256__in=digests)[:20]


def visible_certify_reports(show_private: bool, limit: int = UNTRACKED_LIMIT) -> list[CertifyReport]:
    """Every report a reader may see, newest first: those for bytes of a package the reader may see, and,
    for a reader who may see private packages, those meshdash tracks no bytes of (a report names its
    package_ref, which may be a private repo's)."""
    visible = Revision.objects.filter(
        manifest_sha256=OuterRef("manifest_sha256"),
        package__in=Package.objects.visible(show_private),
    )
    reports = CertifyReport.objects.filter(Exists(visible))
    if show_private:
        reports = reports | CertifyReport.objects.filter(
            ~Exists(Revision.objects.filter(manifest_sha256=OuterRef("manifest_sha256")))
        )
    return list(reports.order_by("-received_at", "-id")[:limit])


def revisions_by_manifest(rows: Iterable[CertifyReport], show_private: bool) -> dict[str, list[Revision]]:
    """The visible revisions holding each report's bytes, newest first (one query)."""
    digests = {r.manifest_sha256 for r in rows}
    found: dict[str, list[Revision]] = {}
    revisions = Revision.objects.filter(
        manifest_sha256__in=digests, package__in=Package.objects.visible(show_private)
    ).select_related("package")
    for revision in revisions.order_by("-committed_at", "-id"):
        found.setdefault(revision.manifest_sha256, []).append(revision)
    return found


def report_json(row: CertifyReport, revisions: Iterable[Revision] = ()) -> dict[str, Any]:
    """How the API and the pages describe one stored report."""
    revision = next(iter(revisions), None)
    return {
        "status": row.status,
        "summary": row.summary,
        "failed_gate": row.failed_gate or None,
        "manifest_sha256": row.manifest_sha256,
        "model_id": row.model_id,
        "resolved_package_ref": row.resolved_package_ref,
        "layer_count": row.layer_count,
        "certified_by": row.certified_by,
        "received_at": row.received_at.isoformat(),
        "via": row.via,
        "revision": {"repo_id": revision.package.repo_id, "commit_sha": revision.commit_sha}
        if revision
        else None,
    }
