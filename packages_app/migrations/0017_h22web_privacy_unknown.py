"""Package.private becomes three-valued: None (unknown, hidden like private) until the Hub says.

A row stored as public that no sync ever confirmed (never synced, or every sync failed, and no revision
stored) was public only by the old default: it becomes unknown, so it stays hidden until a sync asks the Hub.
"""

from django.db import migrations, models


def unconfirmed_to_unknown(apps, schema_editor):  # type: ignore[no-untyped-def]
    Package = apps.get_model("packages_app", "Package")
    unconfirmed = Package.objects.filter(private=False, revisions__isnull=True).filter(
        models.Q(last_synced_at__isnull=True) | ~models.Q(sync_error="")
    )
    Package.objects.filter(pk__in=list(unconfirmed.values_list("pk", flat=True))).update(private=None)


def unknown_to_private(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Going back to two values: what is unknown stays hidden.
    apps.get_model("packages_app", "Package").objects.filter(private__isnull=True).update(private=True)


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0016_h23_fix_proposals"),
    ]

    operations = [
        migrations.AlterField(
            model_name="package",
            name="private",
            field=models.BooleanField(
                default=None,
                help_text="What the Hub says of the repo's visibility: private (yes), public (no), or unknown "
                "(not yet synced). Only public packages are shown to users who may not see private ones.",
                null=True,
            ),
        ),
        migrations.RunPython(unconfirmed_to_unknown, unknown_to_private),
    ]
