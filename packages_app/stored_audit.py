"""A revision's audit recomputed from what is stored (files, headers), with its own or another manifest.

A service with no Hub access and no writes: ``ingest`` stores the result as the revision's audit, and
``fix_plans`` re-checks a patched manifest with it on the web path too (it never loads the Hub client).
"""

from __future__ import annotations

from packages_app import audit as auditing
from packages_app.models import PackageFile, Revision


def stored_header_json(f: PackageFile) -> dict[str, object]:
    """The header JSON of docs/design.md, rebuilt from a stored file row."""
    kv = f.kv or {}
    return {
        "version": f.gguf_version,
        "header_bytes": f.header_bytes,
        "alignment": kv.get("general.alignment", 32) if isinstance(kv, dict) else 32,
        "kv": kv,
        "tensors": f.tensors or [],
    }


def audit_stored(rev: Revision, manifest: bytes | None) -> auditing.Audit:
    """The audit of ``manifest`` against the revision's stored files and headers; stores nothing.

    With the revision's own manifest it is the revision's audit; with a patched one, what the revision
    would audit to if it carried that manifest (``fix_plans`` re-checks a fix with it before sending it).
    """
    files = list(rev.files.all())
    listing = [auditing.FileInfo(path=f.path, size=f.size, lfs_sha256=f.lfs_sha256 or None) for f in files]
    parsed = [f for f in files if f.header_status == PackageFile.HeaderStatus.PARSED]
    headers = {f.path: stored_header_json(f) for f in parsed}
    errors = {f.path: f.header_error for f in files if f.header_status == PackageFile.HeaderStatus.FAILED}
    return auditing.audit(
        manifest,
        listing,
        headers,
        revision=rev.commit_sha,
        header_errors=errors,
        source=f"{rev.package.repo_id} --revision {rev.commit_sha}",
    )
