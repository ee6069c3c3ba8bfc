import django.db.models.deletion
from django.db import migrations, models


def claim_registered_runs(apps, schema_editor):
    """Each run id already registered belongs to the node that registered it first."""
    NodeRun = apps.get_model("packages_app", "NodeRun")
    RunClaim = apps.get_model("packages_app", "RunClaim")
    claimed: set[str] = set()
    rows = NodeRun.objects.order_by("first_seen_at", "id").values_list("run_id", "node_id", "first_seen_at")
    batch = []
    for run_id, node_id, seen in rows.iterator():
        if run_id in claimed:
            continue
        claimed.add(run_id)
        batch.append(RunClaim(run_id=run_id, node_id=node_id, claimed_at=seen))
        if len(batch) >= 1000:
            RunClaim.objects.bulk_create(batch)
            batch = []
    RunClaim.objects.bulk_create(batch)


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0013_issue19_assessment")]

    operations = [
        migrations.CreateModel(
            name="RunClaim",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("run_id", models.CharField(max_length=200, unique=True)),
                ("claimed_at", models.DateTimeField(auto_now_add=True)),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="run_claims",
                        to="packages_app.node",
                    ),
                ),
            ],
        ),
        migrations.RunPython(claim_registered_runs, migrations.RunPython.noop),
    ]
