from django.db import migrations, models

# Serving.sole_strategy: the strategy every report of a row ran, filled from the rows' total-grain Rollup
# cells (one a strategy), spelled as rollups.strategy_key spells it. A row whose cells ran several, and
# any row left unfilled, keeps "": its readers then read the cells' strategies, as before this column.
PICK = """
    UPDATE packages_app_serving AS s SET sole_strategy = f.pair
    FROM (
        SELECT revision_id, node_key, topology_id, stage_splits, min(pair) AS pair
        FROM (
            SELECT revision_id, node_key, topology_id, stage_splits, {pair} AS pair
            FROM packages_app_rollup WHERE grain = 'total'
        ) AS c
        GROUP BY revision_id, node_key, topology_id, stage_splits
        HAVING min(pair) = max(pair)
    ) AS f
    WHERE s.revision_id = f.revision_id AND s.node_key = f.node_key AND s.topology_id = f.topology_id
      AND s.stage_splits = f.stage_splits
"""
FILL = {
    "postgresql": PICK.format(pair="jsonb_build_array(requested_strategy, strategy, mtp_used)::text"),
    "sqlite": PICK.format(
        pair="'[' || json_quote(requested_strategy) || ', ' || json_quote(strategy) || ', '"
        " || iif(mtp_used, 'true', 'false') || ']'"
    ),
}


def fill(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute(FILL[connection.vendor])


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0022_h25_node_rollups"),
    ]

    operations = [
        migrations.AddField(
            model_name="serving",
            name="sole_strategy",
            field=models.TextField(
                blank=True,
                default="",
                help_text="The strategy every report of the row ran (rollups.strategy_key); empty when they "
                "ran more than one.",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
