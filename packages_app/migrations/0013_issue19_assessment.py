"""The assessment (issue 19): every revision's headline status, as a column, and its whole assessment.

Filled by re-auditing what is stored (the manifest's exact bytes, the file list, the parsed headers), as
0003 did: only derived columns are written, so nothing stored is lost and `manage.py reaudit` recomputes
the same at any time. Reversing drops the two columns.
"""

from typing import Any

from django.db import migrations, models
from django.db.models import Q


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


def assess_stored(apps: Any, schema_editor: Any) -> None:
    from packages_app import audit as auditing

    revision_model = apps.get_model("packages_app", "Revision")
    file_model = apps.get_model("packages_app", "PackageFile")
    audited = revision_model.objects.filter(Q(status="done") | Q(audit__isnull=False))
    revisions = audited.select_related("package")
    for rev in revisions.iterator(chunk_size=50):
        files = list(file_model.objects.filter(revision_id=rev.pk))
        listing = [auditing.FileInfo(f.path, f.size, f.lfs_sha256 or None) for f in files]
        headers = {f.path: _header(f) for f in files if f.header_status == PARSED}
        errors = {f.path: f.header_error for f in files if f.header_status == FAILED}
        manifest = bytes(rev.manifest_bytes) if rev.manifest_bytes is not None else None
        source = f"{rev.package.repo_id} --revision {rev.commit_sha}"
        result = auditing.audit(manifest, listing, headers, rev.commit_sha, errors, source=source)
        assessment = result.assessment
        revision_model.objects.filter(pk=rev.pk).update(
            headline=assessment.status.value if assessment else "",
            assessment=assessment.to_json() if assessment else None,
        )


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0012_issue12_serving")]

    operations = [
        migrations.AddField(
            model_name="revision",
            name="headline",
            field=models.CharField(blank=True, db_index=True, default="", max_length=32),
        ),
        migrations.AddField(
            model_name="revision",
            name="assessment",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(assess_stored, migrations.RunPython.noop, elidable=True),
    ]
