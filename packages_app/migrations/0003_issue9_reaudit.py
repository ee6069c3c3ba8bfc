"""Re-audit every stored revision under the rulebook (issue 9): mesh-llm's own validation codes, the resolver
table and the release matrix.

Only the derived columns change (verdict, audit JSON and the facts copied from it); the stored inputs (the
manifest's exact bytes, the file list, the parsed headers) are read, never written, so nothing stored is lost
and `manage.py reaudit` can recompute the same result at any time. Reversing keeps the new audits: the old
audit logic no longer exists to recompute the old ones.
"""

from typing import Any

from django.db import migrations
from django.utils import timezone

from packages_app import audit as auditing

QUEUED = "queued"
PARSED, FAILED = "parsed", "failed"


def _header(f: Any) -> dict[str, Any]:
    kv = f.kv if isinstance(f.kv, dict) else {}
    return {
        "version": f.gguf_version,
        "header_bytes": f.header_bytes,
        "alignment": kv.get("general.alignment", 32),
        "kv": kv,
        "tensors": f.tensors or [],
    }


def _small(value: Any) -> int | None:
    return value if isinstance(value, int) and 0 <= value <= 2**31 - 1 else None


def reaudit(apps: Any, schema_editor: Any) -> None:
    revision_model = apps.get_model("packages_app", "Revision")
    file_model = apps.get_model("packages_app", "PackageFile")
    for rev in revision_model.objects.exclude(status=QUEUED).iterator(chunk_size=50):
        files = list(file_model.objects.filter(revision_id=rev.pk))
        listing = [auditing.FileInfo(f.path, f.size, f.lfs_sha256 or None) for f in files]
        headers = {f.path: _header(f) for f in files if f.header_status == PARSED}
        errors = {f.path: f.header_error for f in files if f.header_status == FAILED}
        manifest = bytes(rev.manifest_bytes) if rev.manifest_bytes is not None else None
        doc = auditing.audit(manifest, listing, headers, rev.commit_sha, header_errors=errors).to_json()
        detected, declared = doc["detected"], doc["declared"]
        revision_model.objects.filter(pk=rev.pk).update(
            verdict=doc["verdict"],
            audit=doc,
            audited_at=timezone.now(),
            mtp_detected=bool(detected.get("has_mtp_weights")),
            mtp_declared=bool(declared.get("uses_native_mtp")),
            architecture=(detected.get("architecture") or "")[:64],
            block_count=_small(detected.get("block_count")),
            nextn_predict_layers=_small(detected.get("nextn_predict_layers")),
        )


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0002_node10_timings_flags_and_node_runs")]

    operations = [migrations.RunPython(reaudit, migrations.RunPython.noop, elidable=True)]
