"""RevisionRollup's decode-rate quartiles, kept beside its sketch (packages_app.rollups.quartiles): the
columns, then every stored row's quartiles ranked from its sketch (sketch.quartiles), as the writers keep
them from now on."""

from itertools import islice
from typing import Any

from django.db import migrations, models

from packages_app.sketch import quartiles

COLUMNS = ("tps_p25", "tps_median", "tps_p75")


def fill(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("packages_app", "RevisionRollup")
    rows = model.objects.exclude(tps_sketch={}).values_list("pk", "tps_sketch").iterator(chunk_size=2000)
    while chunk := list(islice(rows, 200)):
        kept = [model(pk=pk, **dict(zip(COLUMNS, quartiles(bins), strict=True))) for pk, bins in chunk]
        model.objects.bulk_update(kept, COLUMNS)


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0034_noderun_releases_from_the_index")]

    operations = [
        migrations.AddField(model_name="revisionrollup", name="tps_p25", field=models.FloatField(null=True)),
        migrations.AddField(
            model_name="revisionrollup", name="tps_median", field=models.FloatField(null=True)
        ),
        migrations.AddField(model_name="revisionrollup", name="tps_p75", field=models.FloatField(null=True)),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
