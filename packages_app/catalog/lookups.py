"""What a package or revision page resolves: the package, the revision a ref names, its history (and
when nodes first ran each revision), its fix proposal, what deleting it removes; and the stored revision a
checked manifest matches (the check page, its API and the check_manifest command)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime

from django.db import DatabaseError
from django.db.models import F, Min, QuerySet

from packages_app import compiled
from packages_app.audit.check import ManifestCheck, check_manifest
from packages_app.catalog.errors import AmbiguousRevision, LookupFailed
from packages_app.models import FixProposal, Package, PackageFile, Revision, Serving

_HISTORY_FIELDS = (
    "package_id",
    "commit_sha",
    "committed_at",
    "title",
    "status",
    "verdict",
    "headline",
    "mtp_detected",
    "mtp_declared",
    "schema_version",
    "total_bytes",
    "error",  # why a revision without a headline is not assessed (verdicts.not_assessed)
)


HISTORY_LIMIT = 200


_SHA_PREFIX = re.compile(r"[0-9a-fA-F]{4,40}")


def first_served(revisions: list[Revision]) -> dict[int, datetime]:
    """When nodes first reported running each of these revisions (one query over the every-node
    serving rows; a revision no node ran is left out)."""
    return dict(compiled.rows(_first_served, [r.pk for r in revisions])) if revisions else {}


def _first_served(revision_ids: Sequence[int]) -> QuerySet[Serving, tuple[int, datetime]]:
    return (
        Serving.objects.filter(revision_id__in=revision_ids, node_key=0)
        .values("revision_id")
        .annotate(first=Min("first_at"))
        .values_list("revision_id", "first")
    )


def fix_proposal_for(package: Package) -> FixProposal | None:
    """The package's newest fix proposal, whatever became of it (a stale or refused one says why). Read by
    SQL compiled once per process (``compiled.instances``), its package the one in hand."""
    newest: list[FixProposal] = compiled.instances(_newest_fix_of, package.pk)
    for fix in newest:
        fix.package = package  # as the related manager's read sets it
    return newest[0] if newest else None


def _newest_fix_of(package_id: int) -> QuerySet[FixProposal]:
    return FixProposal.objects.filter(package_id=package_id).order_by("-id")[:1]


def get_package(owner: str, name: str, show_private: bool = False, *, with_latest: bool = False) -> Package:
    """The package, or LookupFailed; a private one the reader may not see is "not tracked" too.
    ``with_latest``: its latest revision read in the same query, for ``resolve_revision`` without a ref
    (the package page and its API: one query fewer, about a millisecond of the ORM's)."""
    repo_id = f"{owner}/{name}"
    found: list[Package] = compiled.instances(_package_of, [repo_id], show_private, with_latest)
    if not found:
        raise LookupFailed(f"No package {repo_id} is tracked.")
    return found[0]


def _package_of(repo_ids: Sequence[str], show_private: bool, with_latest: bool) -> QuerySet[Package]:
    """The package of this repo id (one, bound as a list: ``compiled.instances`` compiles a plain text
    into its SQL), with its latest revision when asked. Compiled once per process and option: the catalog
    seed's busiest revision with MTP and its package took 1.3 ms built by the ORM each read, 0.85 compiled
    (medians of 100 reads, side by side; its audit alone is 38 kB of JSON)."""
    packages = Package.objects.visible(show_private).filter(repo_id__in=repo_ids)
    if with_latest:
        packages = packages.select_related("latest_revision")
    return packages.order_by("pk")[:1]


def package_counts(package: Package) -> dict[str, int]:
    """How many revisions and files a package holds (what deleting it removes)."""
    files = PackageFile.objects.filter(revision__package=package).count()
    return {"revisions": package.revisions.count(), "files": files}


def resolve_revision(package: Package, ref: str | None) -> Revision | None:
    """The revision ``ref`` names (a full sha or a prefix of at least 4 hex digits), else the latest.

    None only when no ``ref`` was given and the package has no revision yet (first sync pending).
    """
    if not ref:
        return _latest_revision(package)
    if not _SHA_PREFIX.fullmatch(ref):
        raise LookupFailed(f"{ref!r} is not a commit sha (4 to 40 hex digits).")
    matches = list(package.revisions.filter(commit_sha__startswith=ref.lower())[:2])
    if not matches:
        raise LookupFailed(f"{package.repo_id} has no revision {ref}.")
    if len(matches) > 1:
        raise AmbiguousRevision(f"{ref} matches several revisions of {package.repo_id}; give more digits.")
    return matches[0]


def _latest_revision(package: Package) -> Revision | None:
    if package.latest_revision_id:
        read = Package.latest_revision.is_cached(package)  # get_package(with_latest=True)
        if read and (latest := package.latest_revision) is not None and latest.package_id == package.pk:
            latest.package = package  # as the related manager's read sets it: no query for it
            return latest
        return package.revisions.filter(id=package.latest_revision_id).first()
    return package.revisions.order_by(F("committed_at").desc(nulls_last=True), "-id").first()


def require_revision(package: Package, ref: str | None) -> Revision:
    revision = resolve_revision(package, ref)
    if revision is None:
        raise LookupFailed(f"{package.repo_id} has no revision yet; its first ingest is still queued.")
    return revision


def judge_manifest(data: bytes, show_private: bool = False) -> tuple[ManifestCheck, Revision | None]:
    """Judge manifest bytes alone (the check page and its API); when a stored revision holds the same
    bytes, its carrier's architecture feeds the split-certification gate and ``audit_package`` is
    pointed at it. A pasted manifest arrives with the browser's CRLF line ends: the LF bytes count too.
    The lookup is best effort: without a database the check still answers."""
    tracked = tracked_manifest(data, show_private)
    source = f"{tracked.package.repo_id} --revision {tracked.commit_sha}" if tracked else ""
    architecture = (tracked.architecture or None) if tracked else None
    return check_manifest(data, source=source, architecture=architecture), tracked


def tracked_manifest(data: bytes, show_private: bool = False) -> Revision | None:
    """The newest stored revision holding these manifest bytes (or their LF form, as a browser pastes CRLF);
    None without one, or without a database (the check answers without it: best effort)."""
    digests = {hashlib.sha256(d).hexdigest() for d in (data, data.replace(b"\r\n", b"\n"))}
    try:
        return revision_with_manifest(digests, show_private)
    except DatabaseError:
        return None


def revision_with_manifest(digests: set[str], show_private: bool = False) -> Revision | None:
    """The newest stored revision whose manifest bytes have one of these sha256 digests (one query)."""
    revisions = Revision.objects.filter(manifest_sha256__in=digests).select_related("package")
    if not show_private:
        revisions = revisions.filter(package__private=False)
    return revisions.order_by(F("committed_at").desc(nulls_last=True), "-id").first()


def revision_history(package: Package) -> list[Revision]:
    """The newest revisions, lightest columns only (the audit JSON stays in the database). Read by SQL
    compiled once per process (``compiled.instances``), each revision's package the one in hand."""
    revisions: list[Revision] = compiled.instances(_history_of, package.pk)
    for revision in revisions:
        revision.package = package  # as the related manager's read sets it
    return revisions


def _history_of(package_id: int) -> QuerySet[Revision]:
    revisions = Revision.objects.filter(package_id=package_id).only(*_HISTORY_FIELDS)
    return revisions.order_by(F("committed_at").desc(nulls_last=True), "-id")[:HISTORY_LIMIT]
