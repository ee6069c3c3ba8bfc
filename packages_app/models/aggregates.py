"""The tables the reports add up to (packages_app/rollups/ writes them): the rollup cells, every node's cells
without the topology split, each node's cells with every strategy together, who served what, and each
revision's last served time.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from packages_app.models.catalog import Package, Revision

ROLLUP_KEY = (
    "revision",
    "grain",
    "node_key",
    "bucket_start",
    "stage_splits",
    "requested_strategy",
    "strategy",
    "mtp_used",
    "topology_id",
)


class RollupFigures(models.Model):
    """The figures a rollup cell adds up over its reports: counts and sums, first and last arrival, and each
    sketched metric's count, sum, minimum, maximum and sketch (packages_app.sketch, as JSON). Rollup and
    RevisionRollup hold them under their own keys."""

    reports = models.BigIntegerField(default=0)
    from_spans = models.BigIntegerField(default=0, help_text="Reports that came as OTLP spans.")
    unused = models.BigIntegerField(
        default=0, help_text="Reports showing MTP unused (rollups.shows_mtp_unused)."
    )
    accepted = models.BigIntegerField(default=0)
    proposed = models.BigIntegerField(default=0)
    windows = models.BigIntegerField(default=0)
    moved = models.BigIntegerField(
        default=0, help_text="Reports placed when observed, before they arrived (report_time: a replay)."
    )
    refused = models.BigIntegerField(
        default=0, help_text="Reports whose observed time was not believed: placed when they arrived."
    )
    first_at = models.DateTimeField(help_text="The first report's arrival.")
    last_at = models.DateTimeField(help_text="The last report's arrival.")

    tps_n = models.BigIntegerField(default=0)
    tps_sum = models.FloatField(default=0)
    tps_min = models.FloatField(null=True)
    tps_max = models.FloatField(null=True)
    tps_sketch = models.JSONField(default=dict)
    prompt_n = models.BigIntegerField(default=0)
    prompt_sum = models.FloatField(default=0)
    prompt_min = models.FloatField(null=True)
    prompt_max = models.FloatField(null=True)
    prompt_sketch = models.JSONField(default=dict)
    acceptance_n = models.BigIntegerField(default=0)
    acceptance_sum = models.FloatField(default=0)
    acceptance_min = models.FloatField(null=True)
    acceptance_max = models.FloatField(null=True)
    acceptance_sketch = models.JSONField(default=dict)

    class Meta:
        abstract = True


class Rollup(RollupFigures):
    """Report figures added up per revision x node x stage split x strategy (requested, effective) x
    MTP used x topology x time bucket.

    Written by packages_app.rollups in the transaction that stores the reports (so each report is
    counted exactly once), read by throughput.py instead of the raw reports. Grains: ``hour`` (kept
    for MESHDASH_ROLLUP_HOURLY_DAYS), ``day`` (kept for good) and ``total`` (one bucket, the whole
    life of the revision); ``node_key`` is the node's id (no foreign key: 0 must be storable), or
    ALL_NODES for the figures of every node together, which the topology page reads (a topology's
    cells); the package page, the catalog and compare read them without the topology split, from
    RevisionRollup. Sketches: packages_app.sketch, as JSON.
    """

    class Grain(models.TextChoices):
        HOUR = "hour"
        DAY = "day"
        TOTAL = "total"

    ALL_NODES = 0

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="rollups")
    node_key = models.BigIntegerField(help_text="Node id, or 0 for every node together.")
    grain = models.CharField(max_length=5, choices=Grain.choices)
    bucket_start = models.DateTimeField()
    stage_splits = models.CharField(max_length=400, blank=True)
    requested_strategy = models.CharField(max_length=64, blank=True)
    strategy = models.CharField(max_length=64, blank=True, help_text="effective_strategy")
    mtp_used = models.BooleanField()
    topology_id = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[*ROLLUP_KEY],
                name="rollup_natural_key",
            ),
        ]
        indexes = [
            # The catalog's alert filter: revisions whose reports show MTP unused.
            models.Index(
                fields=["revision"],
                condition=Q(grain="total", node_key=0, unused__gt=0),
                name="rollup_unused_revisions",
            ),
            # Pruning hourly rows past their window. (A window's cells of some revisions and nodes are
            # ranges of the natural key; which revisions nodes ran lately is in Serving.)
            models.Index(fields=["grain", "bucket_start"], name="rollup_grain_time"),
        ]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.grain}:{self.bucket_start:%Y-%m-%dT%H}:{self.node_key}"


REVISION_ROLLUP_KEY = tuple(name for name in ROLLUP_KEY if name not in ("node_key", "topology_id"))


class RevisionRollup(RollupFigures):
    """Every node's report figures per revision x stage split x strategy (requested, effective) x MTP
    used x time bucket: Rollup's every-node cells (node_key ALL_NODES) added up over their topologies.

    Kept by packages_app.rollups from the same cells as Rollup, in the same transaction (and rebuilt,
    pruned and deleted with them). The package page, the catalog, compare and the served revisions read
    these: the topologies grow with the nodes, a revision's strategies and splits do not (the seeded
    busiest revision's every-node day cells: 1,711 Rollup rows at 1,000 nodes and 13,367 at 10,000;
    337 and 357 rows here).
    """

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+", db_index=False)
    grain = models.CharField(max_length=5, choices=Rollup.Grain.choices)
    bucket_start = models.DateTimeField()
    stage_splits = models.CharField(max_length=400, blank=True)
    requested_strategy = models.CharField(max_length=64, blank=True)
    strategy = models.CharField(max_length=64, blank=True, help_text="effective_strategy")
    mtp_used = models.BooleanField()
    # The decode-rate quartiles of the timeline point the row is in (its grain, bucket, stage split and
    # strategy: every requested strategy and MTP used together), the same on each of its rows
    # (rollups.quartiles): the timeline reads these, not the sketches. Null while the point has no rate.
    point_tps_p25 = models.FloatField(null=True)
    point_tps_median = models.FloatField(null=True)
    point_tps_p75 = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=[*REVISION_ROLLUP_KEY], name="revisionrollup_natural_key"),
        ]
        # Pruning hourly rows past their window.
        indexes = [models.Index(fields=["grain", "bucket_start"], name="revisionrollup_grain_time")]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.grain}:{self.bucket_start:%Y-%m-%dT%H}"


PLAN_ROLLUP_KEY = ("revision", "node_key", "stage_splits", "requested_strategy", "strategy")


class PlanRollup(RollupFigures):
    """A node's plan on a revision over its whole life: its figures per stage split x strategy (requested,
    effective), whether MTP ran or not and every topology together: Rollup's per-node total cells added up
    (``node_key`` a node's id, never ALL_NODES).

    Kept by packages_app.rollups from the same cells as Rollup, in the same transaction (and rebuilt and
    deleted with them). The package page and its API read a revision's busiest plans from the index by
    reports, its node count and the nodes its unused-MTP alert names from these: the busiest seeded
    revision has 2,180 per-node total cells at 10,000 nodes, nearly one plan each, which every request
    read and grouped before (issue 43).
    """

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+", db_index=False)
    node_key = models.BigIntegerField(help_text="Node id.")
    stage_splits = models.CharField(max_length=400, blank=True)
    requested_strategy = models.CharField(max_length=64, blank=True)
    strategy = models.CharField(max_length=64, blank=True, help_text="effective_strategy")

    class Meta:
        constraints = [models.UniqueConstraint(fields=[*PLAN_ROLLUP_KEY], name="planrollup_natural_key")]
        indexes = [
            # A revision's busiest plans, walked from the most reports down.
            models.Index(fields=["revision", "-reports"], name="planrollup_busiest"),
            # The nodes a revision's unused-MTP alert names (node_plans.unused_by_node), from the index
            # alone: the plans whose reports show it, not every plan of the revision.
            models.Index(
                fields=["revision", "node_key"],
                include=["unused"],
                condition=Q(unused__gt=0),
                name="planrollup_unused",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.node_key}:{self.stage_splits}:{self.requested_strategy}"


SPLIT_ROLLUP_KEY = ("revision", "node_key", "stage_splits", "mtp_used")


class SplitRollup(RollupFigures):
    """A node's figures on a revision per stage split and MTP used over its whole life, every strategy and
    topology together: Rollup's per-node total cells added up (``node_key`` a node's id, never ALL_NODES).

    Kept by packages_app.rollups from the same cells as Rollup, in the same transaction (and rebuilt and
    deleted with them). The speedups (baselines.speedups, through speedup_cells) pair MTP on with MTP off
    per stage split and node release from these: the catalog seed's busiest revision with MTP has 240 rows
    where its per-node total cells (one a node, split, strategy and MTP used) are 720, which every package
    page read before, merging 240 of their sketches where it now merges 80 (issue 43).
    """

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+", db_index=False)
    node_key = models.BigIntegerField(help_text="Node id.")
    stage_splits = models.CharField(max_length=400, blank=True)
    mtp_used = models.BooleanField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=[*SPLIT_ROLLUP_KEY], name="splitrollup_natural_key")]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.node_key}:{self.stage_splits}:{self.mtp_used}"


class NodeRollup(models.Model):
    """A node's report figures per revision x stage split x hour or day, every strategy and topology
    together: its reports, decode-rate sketch and reports per strategy (``strategies``, keyed by the
    JSON text of ``[requested, effective, mtp_used]``).

    Kept by packages_app.rollups from the same cells as Rollup, in the same transaction (and rebuilt,
    pruned and deleted with them). The nodes pages read a node's rows in a window from these: one cell
    a bucket where Rollup has one per strategy pair and topology (six and more on a busy node).
    """

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+", db_index=False)
    node_key = models.BigIntegerField(help_text="Node id (never 0: every node's figures are Rollup's).")
    grain = models.CharField(max_length=5, choices=Rollup.Grain.choices)
    bucket_start = models.DateTimeField()
    stage_splits = models.CharField(max_length=400, blank=True)
    reports = models.BigIntegerField(default=0)
    tps_sketch = models.JSONField(default=dict)
    strategies = models.JSONField(
        default=dict, help_text='Reports per strategy: {"[requested, effective, mtp_used]": count}.'
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "grain", "node_key", "bucket_start", "stage_splits"],
                name="noderollup_natural_key",
            ),
        ]
        # Pruning hourly rows past their window.
        indexes = [models.Index(fields=["grain", "bucket_start"], name="noderollup_grain_time")]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.grain}:{self.bucket_start:%Y-%m-%dT%H}:{self.node_key}"


class Serving(models.Model):
    """Who ran a revision and when: per revision x node x topology x stage split, how many reports, the
    first and the last, the last that showed MTP unused, and the strategy they ran when they all ran one
    (``node_key`` as Rollup's: 0 for every node). A node runs the strategy its configuration names, so
    judging its advice (packages_app.fleet) reads the cells' strategies only of the rows that ran several.

    Kept by packages_app.rollups beside the rollups, in the same transaction from the same rows, so
    "served in the last N days" is one comparison per row: the catalog's served-revision filters, the
    nodes pages and the topology page read these rows, whose number grows with revisions x nodes x
    topologies x splits, never with reports or days.
    """

    # Indexed by the natural key and serving_revision_recent, which both start with it.
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="servings", db_index=False)
    node_key = models.BigIntegerField(help_text="Node id, or 0 for every node together.")
    topology_id = models.CharField(max_length=200, blank=True, default="")
    stage_splits = models.CharField(max_length=400, blank=True)
    reports = models.BigIntegerField(default=0)
    unused = models.BigIntegerField(
        default=0, help_text="Reports showing MTP unused (rollups.shows_mtp_unused)."
    )
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    last_unused_at = models.DateTimeField(null=True, help_text="The newest report showing MTP unused.")
    sole_strategy = models.TextField(
        blank=True,
        default="",
        help_text="The strategy every report of the row ran (rollups.strategy_key); empty when they ran more "
        "than one.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "node_key", "topology_id", "stage_splits"], name="serving_natural_key"
            ),
        ]
        indexes = [
            # Revisions served since a time (node_key 0: every node's), and those showing MTP unused.
            models.Index(fields=["node_key", "last_at", "revision"], name="serving_recent"),
            # Who ran these revisions since a time (the catalog's rows): an index-only scan a revision.
            models.Index(
                fields=["revision", "last_at"],
                include=["node_key", "last_unused_at"],
                name="serving_revision_recent",
            ),
            models.Index(
                fields=["node_key", "last_unused_at", "revision"],
                condition=Q(last_unused_at__isnull=False),
                name="serving_recent_unused",
            ),
            # What ran on a topology since a time (its page reads the every-node rows).
            models.Index(fields=["topology_id", "node_key", "last_at"], name="serving_topology_recent"),
            # A node's busiest rows, and a topology's: the nodes pages and the topology page read the
            # first few in this order (a LIMIT), never all of a node's or a topology's rows sorted.
            models.Index(fields=["node_key", "-reports"], name="serving_node_busiest"),
            models.Index(fields=["topology_id", "node_key", "-reports"], name="serving_topology_busiest"),
        ]

    def __str__(self) -> str:
        return f"{self.revision_id}:{self.node_key}:{self.topology_id or '-'}:{self.stage_splits or '-'}"


class LastServed(models.Model):
    """When nodes last ran a revision, and last reported its MTP weights unused: its every-node Serving
    rows' newest ``last_at`` and ``last_unused_at``, one row a revision.

    Kept by packages_app.rollups with the Serving rows, in the same transaction. The catalog asks of
    every visible package whether nodes ran a broken revision of it, or one with MTP unused, in the
    window: over these rows that is one comparison a revision, where over Serving it was a scan of every
    topology and split of every revision served in the window.
    """

    revision = models.OneToOneField(
        Revision, on_delete=models.CASCADE, primary_key=True, related_name="last_served"
    )
    # The revision's package (a revision never changes package): the catalog tells the revisions that
    # are not their package's latest by comparing this row with the package's, not through the revision.
    package = models.ForeignKey(Package, on_delete=models.CASCADE, related_name="+")
    last_at = models.DateTimeField()
    last_unused_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.revision_id}: {self.last_at:%Y-%m-%d %H:%M}"
