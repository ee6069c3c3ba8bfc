"""The decode-rate quartiles of each timeline point, kept on its RevisionRollup rows
(packages_app.rollups.quartiles): the columns, then every stored point's quartiles, ranked from its rows'
sketches merged (sketch.quartiles), as the writers keep them from now on."""

from itertools import groupby
from typing import Any

from django.db import migrations, models

from packages_app import sketch

COLUMNS = ("point_tps_p25", "point_tps_median", "point_tps_p75")
POINT = ("revision_id", "grain", "bucket_start", "stage_splits", "strategy")


def fill(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("packages_app", "RevisionRollup")
    rows = model.objects.order_by(*POINT).values_list(*POINT, "pk", "tps_sketch").iterator(chunk_size=2000)
    kept = []
    for _, cells in groupby(rows, key=lambda row: row[:5]):
        point = list(cells)
        bins = sketch.merged(sketch.from_json(row[6]) for row in point)
        figures = dict(zip(COLUMNS, sketch.quartiles(bins), strict=True))
        kept += [model(pk=row[5], **figures) for row in point]
        if len(kept) >= 2000:
            model.objects.bulk_update(kept, COLUMNS, batch_size=200)
            kept = []
    model.objects.bulk_update(kept, COLUMNS, batch_size=200)


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0034_noderun_releases_from_the_index")]

    operations = [
        *(
            migrations.AddField(model_name="revisionrollup", name=name, field=models.FloatField(null=True))
            for name in COLUMNS
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
