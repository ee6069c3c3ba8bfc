"""An index on the rollup cells by node and time: the nodes pages read a node's cells of a window,
the catalog's served-revision filters the all-node cells (node_key 0) of a window; revision_id and
unused are in the key so that those filters are index-only scans on PostgreSQL (SQLite has no INCLUDE).

Raw SQL, outside the model state (models.py is not changed), so it can be merged after the month
partitioning of issue 12 item 2 (0009) by changing only the dependency below.
"""

from django.db import migrations

CREATE = (
    "CREATE INDEX IF NOT EXISTS rollup_node_time "
    "ON packages_app_rollup (node_key, grain, bucket_start, revision_id, unused)"
)


class Migration(migrations.Migration):
    dependencies = [("packages_app", "0008_rollup12_raw_reports_need_no_covering_index")]

    operations = [migrations.RunSQL(CREATE, reverse_sql="DROP INDEX IF EXISTS rollup_node_time")]
