"""Revision.refused_by: the releases that refuse a revision, read from the release matrix its audit stores
(0003 computed it), so the catalog can filter "refused by <release>". Only a derived column is added."""

from typing import Any

from django.db import migrations, models

from packages_app.audit.releases import refused_key


def fill(apps: Any, schema_editor: Any) -> None:
    revision_model = apps.get_model("packages_app", "Revision")
    for rev in revision_model.objects.exclude(audit=None).only("pk", "audit").iterator(chunk_size=200):
        rows = rev.audit.get("compatibility") if isinstance(rev.audit, dict) else None
        key = refused_key(rows if isinstance(rows, list) else [])
        if key:
            revision_model.objects.filter(pk=rev.pk).update(refused_by=key)


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0003_issue9_reaudit")]

    operations = [
        migrations.AddField(
            model_name="revision",
            name="refused_by",
            field=models.CharField(blank=True, default="", max_length=500),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
