# A fix proposal remembers meshdash's verdict comment on its pull request (posted once, after the merged
# revision is ingested), and may end "unneeded" when the Hub already holds the patched manifest; an
# operator's "Sync from the Hub" is written to the action log.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('packages_app', '0024_revision_facets_sort_keys'),
    ]

    operations = [
        migrations.AddField(
            model_name='fixproposal',
            name='reported_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='fixproposal',
            name='verdict_comment_id',
            field=models.CharField(blank=True, help_text="The Hub's id of meshdash's comment with the landed verdict.", max_length=64),
        ),
        migrations.AlterField(
            model_name='actionlog',
            name='action',
            field=models.CharField(choices=[('track', 'Track'), ('untrack', 'Untrack'), ('delete', 'Delete'), ('reingest', 'Reingest'), ('node-create', 'Node Create'), ('node-revoke', 'Node Revoke'), ('node-rotate', 'Node Rotate'), ('propose-fix', 'Propose Fix'), ('sync', 'Sync')], max_length=16),
        ),
        migrations.AlterField(
            model_name='fixproposal',
            name='status',
            field=models.CharField(choices=[('opening', 'Opening'), ('open', 'Open'), ('merged', 'Merged'), ('closed', 'Closed'), ('stale', 'Stale'), ('failed', 'Failed'), ('unneeded', 'Unneeded')], db_index=True, default='opening', max_length=8),
        ),
    ]
