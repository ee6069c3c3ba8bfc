# mesh-llm's `models certify` reports (docs/rules.md section 6b), keyed by the manifest sha256 they tested.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('packages_app', '0026_package_model_card_and_catalog_rows'),
    ]

    operations = [
        migrations.CreateModel(
            name='CertifyReport',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(help_text="sha256 of the report's canonical JSON.", max_length=64, unique=True)),
                ('manifest_sha256', models.CharField(db_index=True, max_length=64)),
                ('status', models.CharField(help_text='passed | failed | incomplete | not_required', max_length=16)),
                ('failed_gate', models.CharField(blank=True, max_length=100)),
                ('summary', models.CharField(help_text='passed, or failed at <gate>', max_length=300)),
                ('model_id', models.CharField(blank=True, max_length=300)),
                ('resolved_package_ref', models.CharField(blank=True, max_length=500)),
                ('layer_count', models.PositiveIntegerField(default=0)),
                ('certified_by', models.CharField(help_text='The node or user that handed it in.', max_length=150)),
                ('via', models.CharField(choices=[('import', 'manage.py import_certify'), ('api', 'POST /api/v1/certify-reports')], max_length=8)),
                ('received_at', models.DateTimeField()),
                ('body', models.JSONField(help_text='The report as handed in.')),
            ],
            options={
                'ordering': ['-received_at', '-id'],
            },
        ),
    ]
