# What a node says about itself (docs/node-report.md section 5), stored with its run: the observations as
# the agent registered them, the few facts advice reads (serving strategy, draft), and whether the node's
# own identity of its bytes names the revision its package ref resolves to. New columns, empty defaults.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0028_rollup_report_placement"),
    ]

    operations = [
        migrations.AddField(
            model_name="noderun",
            name="draft_name",
            field=models.CharField(blank=True, help_text="/api/status draft_name.", max_length=300),
        ),
        migrations.AddField(
            model_name="noderun",
            name="identity",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "not reported by the node"),
                    ("confirmed", "confirmed by the node"),
                    ("other", "another tracked revision"),
                    ("unaudited", "bytes meshdash has not audited"),
                ],
                help_text="Whether the node's own identity of what it loaded (admission.package_id, the exchanges' model_revision and weights_digest) names the revision its package ref resolves to.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="noderun",
            name="observations",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="Serving strategy, twin policy, draft, split readiness and exchange provenance as the node reported them (bounded; not_reported and trimmed say what is missing or was cut).",
            ),
        ),
        migrations.AddField(
            model_name="noderun",
            name="served_revision",
            field=models.ForeignKey(
                blank=True,
                help_text="The tracked revision the node's own identity names (when it names one).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="node_runs_served",
                to="packages_app.revision",
            ),
        ),
        migrations.AddField(
            model_name="noderun",
            name="serving_strategy",
            field=models.CharField(
                blank=True,
                help_text="--strategy as /api/status reports it; empty when it names none.",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="noderun",
            name="strategy_speculative",
            field=models.CharField(
                blank=True,
                help_text="The speculative.strategy the serving strategy set where the operator left it unset.",
                max_length=64,
            ),
        ),
    ]
