# revision_facets also covers the catalog's sort keys and its other revision filters, so a catalog
# page's ids come from an index-only scan (catalog.listing._packages_of). The index is rebuilt: a second or two
# for tens of thousands of revisions.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0023_h25_serving_sole_strategy"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="revision",
            name="revision_facets",
        ),
        migrations.AddIndex(
            model_name="revision",
            index=models.Index(
                fields=["id"],
                include=(
                    "verdict",
                    "headline",
                    "architecture",
                    "mtp_detected",
                    "mtp_declared",
                    "committed_at",
                    "total_bytes",
                    "block_count",
                    "schema_version",
                    "status",
                ),
                name="revision_facets",
            ),
        ),
    ]
