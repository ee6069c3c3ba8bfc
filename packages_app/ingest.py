"""Services that write ingest results: a revision's manifest, its files, GGUF header summaries and audit.

Every write is keyed on a natural key, and a revision is claimed before it is worked on, so re-runs,
retries and racing workers leave the same rows. Nothing here talks to the Hub directly: a source
object (packages_app/hub/) is passed in or built from the repo id. Which packages are tracked, and
their commits, is ``tracking``'s.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import F, Q
from django.utils import timezone

from packages_app import audit as auditing
from packages_app import hub, inspection, judgements
from packages_app import manifest as manifests
from packages_app.audit.releases import refused_key
from packages_app.gguf_results import GGUFHeader
from packages_app.layout import MANIFEST_FILE, classify_path
from packages_app.models import Package, PackageFile, Revision
from packages_app.reports import link_reports_to_revision
from packages_app.stored_audit import audit_stored
from packages_app.tracking import record_privacy, refresh_latest

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
# What one revision's stored audit may hold (cap_audit); a real package has under 200 files and blocks.
AUDIT_LIST_LIMIT = 2000
AUDIT_TEXT_LIMIT = 1024 * 1024
STALE_CLAIM = timedelta(seconds=getattr(settings, "CELERY_TASK_TIME_LIMIT", 660) * 2)


# --- claiming ---------------------------------------------------------------------------------


def claim_revision(revision_id: int, token: str) -> bool:
    """Take the revision for this worker; False when it is done or another live worker holds it.

    A redelivered task carries the same token, so it takes over from a worker that died mid-way.
    """
    now = timezone.now()
    claimable = Q(status__in=[Revision.Status.QUEUED, Revision.Status.FAILED]) | Q(
        status=Revision.Status.RUNNING
    ) & (Q(claim_token=token) | Q(started_at__lt=now - STALE_CLAIM))
    updated = Revision.objects.filter(claimable, pk=revision_id).update(
        status=Revision.Status.RUNNING,
        claim_token=token,
        started_at=now,
        finished_at=None,
        error="",
        attempts=F("attempts") + 1,
    )
    return updated == 1


def release_timed_out(repo_id: str, commit_sha: str, limit_seconds: int, give_up_after: int) -> str:
    """An ingest stopped by the time limit: queue it again for the reconciler, or fail it for good.

    Giving up after ``give_up_after`` attempts keeps a package too slow to ever finish from costing a
    worker its whole time limit on every reconcile, forever.
    """
    rev = Revision.objects.filter(package__repo_id=repo_id, commit_sha=commit_sha).first()
    if rev is None:
        return ""
    if rev.attempts >= give_up_after:
        status, message = Revision.Status.FAILED, "not retried: it was stopped every time"
    else:
        status, message = Revision.Status.QUEUED, "queued again; the reconciler retries it"
    _finish(rev, status, f"stopped by the {limit_seconds} s time limit on attempt {rev.attempts}; {message}")
    return status


def quarantine_revision(repo_id: str, commit_sha: str, message: str) -> None:
    """A poison message: fail the revision with a message instead of running it again."""
    Revision.objects.filter(package__repo_id=repo_id, commit_sha=commit_sha).update(
        status=Revision.Status.FAILED, error=message, finished_at=timezone.now()
    )


# --- ingest -----------------------------------------------------------------------------------


@dataclass
class IngestOutcome:
    revision: Revision
    ran: bool


def ingest_revision(
    repo_id: str,
    revision: str | None = None,
    *,
    source: hub.PackageSource | None = None,
    claim: str | None = None,
    progress: ProgressFn | None = None,
) -> IngestOutcome:
    """Ingest one pinned revision: manifest, file list, headers, audit. Idempotent."""
    source = source or hub.HubSource(repo_id)
    sha = revision if revision and hub.SHA_RE.match(revision) else source.resolve_revision(revision)
    package, _ = Package.objects.get_or_create(repo_id=repo_id)
    _learn_privacy(package, source)
    if revision == sha:
        require_known_commit(source, package, sha)
    rev, _ = Revision.objects.get_or_create(package=package, commit_sha=sha)
    if rev.committed_at is None:
        _fill_commit_info(rev, source)
    if not claim_revision(rev.pk, claim or uuid.uuid4().hex):
        rev.refresh_from_db()
        return IngestOutcome(rev, ran=False)
    try:
        _ingest_claimed(rev, source, progress)
    except hub.HubError as exc:
        status = Revision.Status.QUEUED if exc.retryable else Revision.Status.FAILED
        _finish(rev, status, str(exc))
        raise
    except (OperationalError, InterfaceError):
        raise  # the database went away: nothing to record it in; the task retries, its claim resumes
    except Exception as exc:
        log.exception("ingest of %s failed", rev)
        _finish(rev, Revision.Status.FAILED, f"internal error: {type(exc).__name__}: {exc}")
        raise
    refresh_latest(package)
    link_reports_to_revision(rev)
    rev.refresh_from_db()
    return IngestOutcome(rev, ran=True)


def require_known_commit(source: hub.PackageSource, package: Package, sha: str) -> None:
    """A pinned sha no sync has stored (a node named it) must be known to the Hub before a row is
    stored for it, or made-up shas would each leave a failed revision behind. HubNotFound otherwise."""
    if not Revision.objects.filter(package=package, commit_sha=sha).exists():
        source.resolve_revision(sha)


def _learn_privacy(package: Package, source: hub.PackageSource) -> None:
    # Read with a token, a repo may be private although no sync ran yet (ingest of a pinned sha); and a
    # package whose privacy is still unknown stays hidden until someone asks: ask.
    asked = getattr(source, "private", False) is not None
    if not asked and (getattr(source, "token", None) or package.private is None):
        source.resolve_revision(None)
    record_privacy(package, source)


def _fill_commit_info(rev: Revision, source: hub.PackageSource) -> None:
    try:
        commits = {c.sha: c for c in source.list_commits(rev.commit_sha)}
    except hub.HubError:
        return  # the commit date is cosmetic; the ingest itself will report a real Hub failure
    commit = commits.get(rev.commit_sha)
    if commit:
        Revision.objects.filter(pk=rev.pk).update(committed_at=commit.date, title=commit.title)


def _finish(rev: Revision, status: str, error: str = "") -> None:
    now = timezone.now()
    # Queued again: its wait starts now (the queue-wait gauge and the "waited over an hour" alert).
    again = {"queued_at": now} if status == Revision.Status.QUEUED else {}
    Revision.objects.filter(pk=rev.pk).update(status=status, error=error, finished_at=now, **again)


def _ingest_claimed(rev: Revision, source: hub.PackageSource, progress: ProgressFn | None) -> None:
    sha = rev.commit_sha
    manifest_error = _store_manifest(rev, source)
    rev.refresh_from_db(fields=["schema_version"])
    files = source.list_files(sha)
    _store_files(rev, files)
    if manifest_error is None:
        _read_headers(rev, source, files, progress)
    audit_revision(rev)
    if manifest_error:
        _finish(rev, Revision.Status.FAILED, manifest_error)
    else:
        _finish(rev, Revision.Status.DONE)
    stats = getattr(source, "stats", None)
    if stats is not None:
        Revision.objects.filter(pk=rev.pk).update(fetch_requests=stats.requests, fetch_bytes=stats.bytes)


def _store_manifest(rev: Revision, source: hub.PackageSource) -> str | None:
    """Keep the manifest's exact bytes; return why the revision cannot be read further, if so."""
    try:
        data = source.read_manifest(rev.commit_sha)
    except hub.HubNotFound:
        return f"{MANIFEST_FILE} not found at {rev.commit_sha[:12]}: not a layer package revision"
    except hub.HubError as exc:
        if exc.retryable or isinstance(exc, hub.HubUnauthorized):
            raise  # nothing was read: no verdict to give, only the reason (or a retry)
        return str(exc)
    parsed, error = _decode_manifest(data)
    refusal = _too_many_artifacts(parsed)
    schema = parsed.get("schema_version") if isinstance(parsed, dict) else None
    Revision.objects.filter(pk=rev.pk).update(
        manifest_bytes=data,
        manifest_sha256=hashlib.sha256(data).hexdigest(),
        manifest_json=None if refusal else parsed,
        schema_version=schema if isinstance(schema, int) and 0 < schema < 100 else None,
    )
    if refusal:  # the bytes are kept; no file list, headers or audit are spent on it
        raise hub.HubRefused(refusal)
    return error


def _decode_manifest(data: bytes) -> tuple[object, str | None]:
    """Parsed JSON is stored only within the manifest parser's limits (size, depth, 64-bit numbers, no
    Infinity): past them it would fail every later read of the row. The raw bytes are always kept."""
    return manifests.load_json(data)


def _too_many_artifacts(parsed: object) -> str | None:
    """A manifest listing more layers or artifacts than any real package: refused before the audit."""
    if not isinstance(parsed, dict):
        return None
    catalog = parsed.get("artifact_catalog")
    entries = catalog.get("entries") if isinstance(catalog, dict) else None
    count = sum(len(x) for x in (parsed.get("layers"), entries) if isinstance(x, list))
    cap = settings.MESHDASH_MAX_MANIFEST_ARTIFACTS
    if count > cap:
        setting = "MESHDASH_MAX_MANIFEST_ARTIFACTS"
        return f"{MANIFEST_FILE} lists {count} artifacts; meshdash reads at most {cap} ({setting})"
    return None


def _store_files(rev: Revision, files: list[hub.RemoteFile]) -> None:
    rows = []
    for f in files:
        place = classify_path(f.path)
        rows.append(
            PackageFile(
                revision=rev,
                path=f.path[:500],
                role=place.role.value,
                layer_index=place.layer,
                part_index=place.part,
                size=f.size,
                lfs_sha256=f.lfs_sha256 or "",
                blob_id=f.blob_id[:64],
            )
        )
    PackageFile.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["revision", "path"],
        update_fields=["role", "layer_index", "part_index", "size", "lfs_sha256", "blob_id"],
    )
    ggufs = sum(1 for f in files if f.path.endswith(".gguf"))
    Revision.objects.filter(pk=rev.pk).update(
        files_total=ggufs, files_done=0, total_bytes=sum(f.size for f in files)
    )


def _read_headers(
    rev: Revision, source: hub.PackageSource, files: list[hub.RemoteFile], progress: ProgressFn | None
) -> None:
    total = sum(1 for f in files if f.path.endswith(".gguf"))
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if progress:
            progress(done, total)

    def record(result: hub.HeaderResult) -> None:
        _store_header(rev, result)
        advance(1)

    def skip(paths: list[str]) -> None:
        skipped = PackageFile.objects.filter(revision=rev, path__in=paths).update(
            header_status=PackageFile.HeaderStatus.SKIPPED, header_error=""
        )
        Revision.objects.filter(pk=rev.pk).update(files_done=F("files_done") + skipped)
        advance(skipped)

    inspection.fetch_package_headers(
        source,
        rev.commit_sha,
        files,
        schema_version=rev.schema_version,
        concurrency=settings.MESHDASH_FETCH_CONCURRENCY,
        on_result=record,
        on_skipped=skip,
    )


def _store_header(rev: Revision, result: hub.HeaderResult) -> None:
    rows = PackageFile.objects.filter(revision=rev, path=result.path)
    if result.header is None:
        rows.update(header_status=PackageFile.HeaderStatus.FAILED, header_error=result.error[:2000])
    else:
        rows.update(**header_fields(result.header))
    Revision.objects.filter(pk=rev.pk).update(files_done=F("files_done") + 1)


def header_fields(header: GGUFHeader) -> dict[str, object]:
    doc = header.to_json()
    return {
        "header_status": PackageFile.HeaderStatus.PARSED,
        "header_error": "",
        "header_bytes": header.header_bytes,
        "gguf_version": header.version,
        "architecture": (header.architecture or "")[:64],
        "block_count": _small_int(header.block_count),
        "nextn_predict_layers": _small_int(header.nextn_predict_layers),
        "kv": doc["kv"],
        "tensors": doc["tensors"],
        "tensor_count": len(header.tensors),
    }


def _small_int(value: object) -> int | None:
    return value if isinstance(value, int) and 0 <= value < 2**31 else None


# --- audit ------------------------------------------------------------------------------------


def audit_revision(rev: Revision, judge: bool = True) -> auditing.Audit:
    """(Re)compute a revision's audit from what is stored; no Hub access. With ``judge``, the nodes whose
    judgement reads it are judged anew (packages_app.judgements), in a transaction with the audit."""
    rev.refresh_from_db()
    manifest = bytes(rev.manifest_bytes) if rev.manifest_bytes is not None else None
    result = audit_stored(rev, manifest)
    doc = cap_audit(result.to_json())
    assessment = result.assessment
    assert assessment is not None  # audit() always assesses
    with transaction.atomic():
        _store_audit(rev, doc, assessment)
        if judge:
            judgements.revisions_changed([rev.pk])
    return result


def _store_audit(rev: Revision, doc: dict[str, Any], assessment: Any) -> None:
    detected, declared = doc["detected"], doc["declared"]
    Revision.objects.filter(pk=rev.pk).update(
        verdict=doc["verdict"],
        headline=assessment.status.value,
        assessment=assessment.to_json(),
        audit=doc,
        audited_at=timezone.now(),
        mtp_detected=bool(detected.get("has_mtp_weights")),
        mtp_declared=bool(declared.get("uses_native_mtp")),
        architecture=(detected.get("architecture") or "")[:64],
        block_count=_small_int(detected.get("block_count")),
        nextn_predict_layers=_small_int(detected.get("nextn_predict_layers")),
        refused_by=refused_key(doc.get("compatibility") or []),
    )


def cap_audit(doc: dict[str, Any]) -> dict[str, Any]:
    """Cut what a hostile package inflates: lists past AUDIT_LIST_LIMIT items, texts past AUDIT_TEXT_LIMIT.

    A 77,000-layer manifest made a 35 MB audit per revision (and a 69 MB page); what was cut is listed
    under ``"truncated"`` as ``{"path", "kept", "total"}`` (a text is dropped whole: ``kept`` 0), so
    pages can say so. The verdict, problems' codes and counts are computed before the cut.
    """
    cut: list[dict[str, Any]] = []
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        node, path = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in items:
            where = f"{path}.{key}".lstrip(".")
            if isinstance(value, str) and len(value) > AUDIT_TEXT_LIMIT:
                node[key] = None
                cut.append({"path": where, "kept": 0, "total": len(value)})
            elif isinstance(value, list) and len(value) > AUDIT_LIST_LIMIT:
                cut.append({"path": where, "kept": AUDIT_LIST_LIMIT, "total": len(value)})
                node[key] = value = value[:AUDIT_LIST_LIMIT]
            if isinstance(value, dict | list):
                stack.append((value, where))
    if cut:
        doc["truncated"] = sorted(cut, key=lambda c: str(c["path"]))
    return doc


def reaudit_all(progress: ProgressFn | None = None) -> int:
    """Recompute every audited revision's audit and assessment (after the audit logic changed); a
    revision whose ingest stopped before its audit, or has not run, has none to recompute."""
    audited = Revision.objects.filter(Q(status=Revision.Status.DONE) | Q(audit__isnull=False))
    ids = list(audited.values_list("pk", flat=True))
    for i, pk in enumerate(ids, 1):
        audit_revision(Revision.objects.get(pk=pk), judge=False)
        if progress:
            progress(i, len(ids))
    judgements.judge(None)  # every node once, rather than its nodes again for each revision
    return len(ids)


def reconcile_stuck(older_than: timedelta = STALE_CLAIM) -> list[tuple[str, str]]:
    """Revisions left queued or running past the claim lease: (repo id, sha) for the caller to re-enqueue."""
    cutoff = timezone.now() - older_than
    stuck = Revision.objects.filter(
        Q(status=Revision.Status.RUNNING, started_at__lt=cutoff)
        | Q(status=Revision.Status.QUEUED, queued_at__lt=cutoff)
    ).select_related("package")
    return [(r.package.repo_id, r.commit_sha) for r in stuck]
