import django.db.models.deletion
from django.db import migrations, models

# LastServed: each revision's newest every-node Serving times, from the Serving rows already stored (as
# rollups.rebuild_last_served does, frozen here). Going back drops the table: Serving keeps the times.
FILL = """
INSERT INTO packages_app_lastserved (revision_id, package_id, last_at, last_unused_at)
SELECT s.revision_id, r.package_id, max(s.last_at), max(s.last_unused_at)
FROM packages_app_serving AS s JOIN packages_app_revision AS r ON r.id = s.revision_id
WHERE s.node_key = 0
GROUP BY s.revision_id, r.package_id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0020_h25perf_busiest_and_facets"),
    ]

    operations = [
        migrations.CreateModel(
            name="LastServed",
            fields=[
                (
                    "revision",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="last_served",
                        serialize=False,
                        to="packages_app.revision",
                    ),
                ),
                (
                    "package",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="packages_app.package",
                    ),
                ),
                ("last_at", models.DateTimeField()),
                ("last_unused_at", models.DateTimeField(null=True)),
            ],
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        # The alert and MTP filters read mtp_detected and mtp_declared beside the facets' columns.
        migrations.RemoveIndex(model_name="revision", name="revision_facets"),
        migrations.AddIndex(
            model_name="revision",
            index=models.Index(
                fields=["id"],
                include=("verdict", "headline", "architecture", "mtp_detected", "mtp_declared"),
                name="revision_facets",
            ),
        ),
    ]
