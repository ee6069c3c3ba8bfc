# The package's model card (base_model, tags: mesh-llm's card.rs marks an unqualified package experimental)
# and the curated catalog's rows that list it, with the source model's revision (docs/rules.md section 6b).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('packages_app', '0025_fix_verdict_comments'),
    ]

    operations = [
        migrations.AddField(
            model_name='package',
            name='base_model',
            field=models.CharField(blank=True, help_text="The card's base_model: the source.", max_length=200),
        ),
        migrations.AddField(
            model_name='package',
            name='card_tags',
            field=models.JSONField(blank=True, default=list, help_text="The card's tags, as the Hub lists them."),
        ),
        migrations.AddField(
            model_name='package',
            name='catalog_rows',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
