"""The stored state: packages, their pinned revisions and files, serving nodes and their reports.

Every table has a natural key under a unique constraint, so a re-run, a retry or two racing
workers write the same rows (docs/design.md).
"""

from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.db import models
from django.db.models import Q

from packages_app import verdicts
from packages_app.audit.revision import StoredAudit
from packages_app.layout import FileRole

FILE_ROLES = [(role.value, role.name.title()) for role in FileRole]


class PackageQuerySet(models.QuerySet["Package"]):
    def public(self) -> PackageQuerySet:
        """Packages the Hub said are public; unknown privacy counts as private."""
        return self.filter(private=False)

    def visible(self, show_private: bool) -> PackageQuerySet:
        """Every package this reader may see (access.can_see_private decides ``show_private``)."""
        return self.all() if show_private else self.public()


class Package(models.Model):
    """A layer-package repo on the Hub, e.g. ``meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers``."""

    repo_id = models.CharField(max_length=96, unique=True)
    tracked = models.BooleanField(default=True, help_text="Synced by the periodic task.")
    # Private until the Hub says public: None (not yet known: tracked, not synced, or every sync failed)
    # is hidden like True; only False is shown to readers without the permission (PackageQuerySet.visible).
    private = models.BooleanField(
        null=True,
        default=None,
        help_text="What the Hub says of the repo's visibility: private (yes), public (no), or unknown "
        "(not yet synced). Only public packages are shown to users who may not see private ones.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    sync_error = models.TextField(blank=True)
    # The newest revision by commit date, kept here so the catalog needs no subquery per row.
    latest_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The model card at the head, as the Hub parses it (hub.ModelCard; docs/rules.md section 6b, card.rs):
    # the source model the package was cut from, and the card's tags (mesh-llm's writer adds "experimental").
    base_model = models.CharField(max_length=200, blank=True, help_text="The card's base_model: the source.")
    card_tags = models.JSONField(
        default=list, blank=True, help_text="The card's tags, as the Hub lists them."
    )
    # The rows of the curated catalog dataset that list this package (hub.CatalogRow.to_json), from discover.
    catalog_rows = models.JSONField(default=list, blank=True)

    objects = PackageQuerySet.as_manager()

    class Meta:
        ordering = ["repo_id"]
        permissions = [
            ("track_package", "Can track a package (start following a Hub repo)"),
            ("reingest_package", "Can re-ingest a package's revisions"),
            ("view_private_package", "Can see packages the Hub says are private"),
            ("propose_fix", "Can open a pull request on the Hub with a revision's patched manifest"),
        ]

    def __str__(self) -> str:
        return self.repo_id

    @property
    def owner(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]

    @property
    def experimental(self) -> bool:
        """The card says so: mesh-llm's writer tags an unqualified package "experimental", with a warning."""
        return isinstance(self.card_tags, list) and "experimental" in self.card_tags


class RevisionQuerySet(models.QuerySet["Revision"]):
    def unfinished(self) -> RevisionQuerySet:
        """Revisions queued or running: what the ingest status page lists."""
        return self.filter(status__in=[Revision.Status.QUEUED, Revision.Status.RUNNING])

    def done(self) -> RevisionQuerySet:
        return self.filter(status=Revision.Status.DONE)


class Revision(models.Model):
    """One commit of a package, pinned by its 40-hex sha, with the manifest it held."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    package = models.ForeignKey(Package, on_delete=models.CASCADE, related_name="revisions")
    commit_sha = models.CharField(max_length=40)
    committed_at = models.DateTimeField(null=True, blank=True)
    title = models.CharField(max_length=500, blank=True)

    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED, db_index=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Who holds the ingest: the Celery task id, so a redelivered task (same id) may take over after a crash.
    claim_token = models.CharField(max_length=64, blank=True)
    files_total = models.PositiveIntegerField(default=0)
    files_done = models.PositiveIntegerField(default=0)
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    fetch_requests = models.PositiveIntegerField(default=0)
    fetch_bytes = models.BigIntegerField(default=0)

    manifest_bytes = models.BinaryField(null=True, blank=True)
    manifest_sha256 = models.CharField(max_length=64, blank=True, db_index=True)
    manifest_json = models.JSONField(null=True, blank=True)
    schema_version = models.PositiveSmallIntegerField(null=True, blank=True)

    # Summary of what the weights hold, copied from the headers for filtering and sorting.
    architecture = models.CharField(max_length=64, blank=True, db_index=True)
    block_count = models.PositiveIntegerField(null=True, blank=True)
    nextn_predict_layers = models.PositiveIntegerField(null=True, blank=True)
    total_bytes = models.BigIntegerField(default=0)

    # The capability audit (packages_app.audit), recomputed by `manage.py reaudit`.
    verdict = models.CharField(max_length=32, blank=True, db_index=True)
    mtp_detected = models.BooleanField(null=True)
    mtp_declared = models.BooleanField(null=True)
    audit = models.JSONField(null=True, blank=True)
    audited_at = models.DateTimeField(null=True, blank=True)
    # The releases that refuse it, from the audit's release matrix, as "|v0.76.1|v0.76.2|": a plain
    # substring filter then works on SQLite and PostgreSQL alike (the catalog's "refused by" filter).
    refused_by = models.CharField(max_length=500, blank=True, default="")
    # The assessment (packages_app.audit.assessment): the headline status every surface leads with, as a
    # column for the catalog's filters, facets and sort; the whole assessment as JSON, read back typed.
    headline = models.CharField(max_length=32, blank=True, default="", db_index=True)
    assessment = models.JSONField(null=True, blank=True)

    objects = RevisionQuerySet.as_manager()

    class Meta:
        ordering = ["-committed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["package", "commit_sha"], name="revision_natural_key"),
            models.CheckConstraint(
                condition=Q(commit_sha__regex=r"^[0-9a-f]{40}$"), name="revision_sha_is_40_hex"
            ),
        ]
        indexes = [
            # The catalog's facets (every page counts the packages per latest verdict, status and
            # architecture), its filters (MTP in the weights, declared; schema; ingest status) and its
            # sort keys (committed, size, layers): an index-only scan, not a read of every wide
            # revision row (queries._packages_of).
            models.Index(
                fields=["id"],
                include=[
                    "verdict",
                    "headline",
                    "architecture",
                    "mtp_detected",
                    "mtp_declared",
                    "committed_at",
                    "total_bytes",
                    "block_count",
                    "schema_version",
                    "status",
                ],
                name="revision_facets",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.package.repo_id}@{self.commit_sha[:12]}"

    @property
    def headline_status(self) -> verdicts.Status:
        """The headline status (packages_app.verdicts), "not assessed" while there is none."""
        return verdicts.status_of(self.headline)

    @property
    def refused_releases(self) -> list[str]:
        return [r for r in self.refused_by.split("|") if r]

    @property
    def short_sha(self) -> str:
        return self.commit_sha[:8]

    @cached_property
    def audited(self) -> StoredAudit:
        """The stored audit read back typed: the one reader of the ``audit`` column's keys."""
        return StoredAudit.from_json(self.audit)


class PackageFile(models.Model):
    """One file of a revision as the Hub lists it, plus the summary of its GGUF header."""

    class HeaderStatus(models.TextChoices):
        PENDING = "pending"
        PARSED = "parsed"
        FAILED = "failed"
        SKIPPED = "skipped"

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=500)
    role = models.CharField(max_length=10, choices=FILE_ROLES, default=FileRole.OTHER.value)
    layer_index = models.PositiveIntegerField(null=True, blank=True)
    part_index = models.PositiveIntegerField(null=True, blank=True)
    size = models.BigIntegerField(default=0)
    lfs_sha256 = models.CharField(max_length=64, blank=True)
    blob_id = models.CharField(max_length=64, blank=True)

    header_status = models.CharField(max_length=8, choices=HeaderStatus.choices, default=HeaderStatus.PENDING)
    header_error = models.TextField(blank=True)
    header_bytes = models.BigIntegerField(null=True, blank=True)
    gguf_version = models.PositiveSmallIntegerField(null=True, blank=True)
    architecture = models.CharField(max_length=64, blank=True)
    block_count = models.PositiveIntegerField(null=True, blank=True)
    nextn_predict_layers = models.PositiveIntegerField(null=True, blank=True)
    kv = models.JSONField(null=True, blank=True, help_text="KV metadata; big arrays summarised.")
    tensors = models.JSONField(null=True, blank=True, help_text="Tensor infos as in the header JSON.")
    tensor_count = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "path"], name="packagefile_natural_key"),
        ]

    def __str__(self) -> str:
        return self.path


class Node(models.Model):
    """A serving node allowed to post reports; its token is stored only as a SHA-256 digest."""

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=12, help_text="First characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty = MESHDASH_NODE_RATE_LIMIT."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ReportKey(models.Model):
    """The claim that makes a report exactly-once: one row per (node, report_id), written first.

    Its id is the id of the Report row it admits. The raw reports are partitioned by month on
    PostgreSQL (packages_app.partitions), and a partitioned table's unique index must contain the
    partition key, so (node, report_id) cannot be unique there: this small unpartitioned table
    carries that constraint on every database. Keys are deleted with their reports' month.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="report_keys")
    report_id = models.UUIDField()
    body_sha256 = models.CharField(max_length=64)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "report_id"], name="reportkey_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.report_id}"


class Report(models.Model):
    """One timing report posted by a node, stored exactly once per (node, report_id).

    The ReportKey row claimed first decides which request stores it, and gives the row its id
    (packages_app.reports.insert_claimed). On PostgreSQL the table is partitioned by month of
    received_at, with the primary key (id, received_at) (migration 0009; packages_app.partitions).

    Reports also come from OTLP spans (``source=otlp``): then report_id is derived from the span id
    and the package is the one the node's agent registered for the span's run id (NodeRun).
    """

    class Source(models.TextChoices):
        REPORT = "report"
        OTLP = "otlp"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="reports")
    report_id = models.UUIDField()
    body_sha256 = models.CharField(max_length=64, help_text="Digest of the canonical body, for replays.")
    received_at = models.DateTimeField(db_index=True)
    observed_at = models.DateTimeField()
    clock_skew_seconds = models.FloatField(default=0)
    clock_skew_flagged = models.BooleanField(default=False)

    repo_id = models.CharField(max_length=96)
    commit_sha = models.CharField(max_length=40, blank=True)
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    # No index of its own: report_revision_time (revision, received_at) serves every lookup by revision.
    revision = models.ForeignKey(
        Revision, null=True, blank=True, on_delete=models.SET_NULL, related_name="reports", db_index=False
    )

    topology_id = models.CharField(max_length=200, blank=True)
    stage_splits = models.CharField(max_length=400, blank=True, help_text="e.g. 0..27|27..41")
    requested_strategy = models.CharField(max_length=64, blank=True)
    effective_strategy = models.CharField(max_length=64, blank=True)
    mtp_source = models.CharField(max_length=16, blank=True)

    predicted_per_second = models.FloatField(null=True, blank=True)
    prompt_per_second = models.FloatField(null=True, blank=True)
    predicted_n = models.BigIntegerField(null=True, blank=True)
    draft_n = models.BigIntegerField(null=True, blank=True)
    draft_n_accepted = models.BigIntegerField(null=True, blank=True)
    speculative_proposed_n = models.BigIntegerField(null=True, blank=True)
    speculative_accepted_n = models.BigIntegerField(null=True, blank=True)
    speculative_windows = models.BigIntegerField(null=True, blank=True, help_text="Draft rounds.")
    mtp_used = models.BooleanField(
        default=False, help_text="Native MTP ran: MTP on and the speculative counters moved."
    )

    body = models.JSONField(help_text="The report as posted.")
    timings_flagged = models.JSONField(
        default=list, blank=True, help_text="timings keys outside plausible bounds: kept, not aggregated."
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.REPORT)
    run_id = models.CharField(max_length=200, blank=True, help_text="skippy.run_id")
    stage_id = models.CharField(max_length=200, blank=True, help_text="skippy.stage_id")

    class Meta:
        ordering = ["-received_at"]
        indexes = [
            # A revision's newest reports (the bounded "recent" table; pages read the rollups, not these).
            models.Index(fields=["revision", "received_at"], name="report_revision_time"),
            models.Index(fields=["repo_id", "commit_sha"], name="report_package_ref"),
            # Spans waiting for their run's registration (equality only: no LIKE index beside it).
            models.Index(fields=["run_id"], name="report_run_id"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.report_id}"


class NodeRun(models.Model):
    """What a node's agent saw for one run id: the package (ref resolved to a commit), the topology.

    Spans carry only ``skippy.run_id``; this row joins them to a package revision.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200, db_index=True)
    topology_id = models.CharField(max_length=200, blank=True)
    model_id = models.CharField(max_length=200, blank=True)
    package_ref = models.CharField(max_length=300, blank=True, help_text="As the node names it.")
    repo_id = models.CharField(max_length=96, blank=True)
    commit_sha = models.CharField(max_length=40, blank=True)
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    revision = models.ForeignKey(
        Revision, null=True, blank=True, on_delete=models.SET_NULL, related_name="node_runs"
    )
    version = models.CharField(max_length=100, blank=True, help_text="mesh-llm version (/api/status)")
    stage_splits = models.CharField(max_length=400, blank=True)
    stages = models.JSONField(default=list, blank=True, help_text="The stages as the console API lists them.")
    devices = models.JSONField(default=list, blank=True)
    certification = models.CharField(
        max_length=64,
        blank=True,
        db_index=True,
        help_text="Split certification: uncertified_override when any stage serves with "
        "--allow-uncertified-split, certified, or empty when the node does not say.",
    )
    # What the node says about itself (docs/node-report.md section 5), as its agent registered it.
    observations = models.JSONField(
        default=dict,
        blank=True,
        help_text="Serving strategy, twin policy, draft, split readiness and exchange provenance as the node "
        "reported them (bounded; not_reported and trimmed say what is missing or was cut).",
    )
    serving_strategy = models.CharField(
        max_length=64, blank=True, help_text="--strategy as /api/status reports it; empty when it names none."
    )
    strategy_speculative = models.CharField(
        max_length=64,
        blank=True,
        help_text="The speculative.strategy the serving strategy set where the operator left it unset.",
    )
    draft_name = models.CharField(max_length=300, blank=True, help_text="/api/status draft_name.")

    class Identity(models.TextChoices):
        NOT_REPORTED = "", "not reported by the node"
        CONFIRMED = "confirmed", "confirmed by the node"
        OTHER = "other", "another tracked revision"
        UNAUDITED = "unaudited", "bytes meshdash has not audited"

    identity = models.CharField(
        max_length=16,
        blank=True,
        choices=Identity.choices,
        help_text="Whether the node's own identity of what it loaded (admission.package_id, the exchanges' "
        "model_revision and weights_digest) names the revision its package ref resolves to.",
    )
    served_revision = models.ForeignKey(
        Revision,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="node_runs_served",
        help_text="The tracked revision the node's own identity names (when it names one).",
    )
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [models.UniqueConstraint(fields=["node", "run_id"], name="noderun_natural_key")]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.run_id}"


class RunClaim(models.Model):
    """Which node a run id belongs to: the first node that registered it or exported a span for it.

    A run id is chosen by the node, so without this any node could register another's run id and
    re-attribute that node's spans to a package of its choosing. Another node's registration or spans
    for a claimed run id are refused (409).
    """

    run_id = models.CharField(max_length=200, unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="run_claims")
    claimed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.run_id} -> node {self.node_id}"


class BaselineReport(models.Model):
    """One window of a baseline engine's counters: a plain llama.cpp or vLLM server serving a model's source
    GGUF or weights, scraped from its Prometheus /metrics by meshdash-agent (POST /api/v1/baselines).

    Joined to a layer package by ``source_model`` (the package manifest's ``source_model.repo``, its card's
    ``base_model``): the decode rate mesh-llm's MTP is compared with. Stored exactly once per (node,
    report_id). ``flagged`` names figures that contradict each other; such a report is kept, shown, and
    left out of the speedup.
    """

    class Engine(models.TextChoices):
        LLAMA_CPP = "llama.cpp"
        VLLM = "vllm"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="baseline_reports")
    report_id = models.UUIDField()
    body_sha256 = models.CharField(max_length=64, help_text="Digest of the canonical body, for replays.")
    received_at = models.DateTimeField()
    observed_at = models.DateTimeField()
    window_seconds = models.FloatField()
    engine = models.CharField(max_length=16, choices=Engine.choices)
    engine_version = models.CharField(max_length=100, blank=True)
    served_model = models.CharField(max_length=300, blank=True)
    source_model = models.CharField(max_length=96, help_text="Hub repo of the GGUF / weights served.")
    source_file = models.CharField(max_length=300, blank=True)
    quantization = models.CharField(
        max_length=64, blank=True, help_text="As configured, else read from source_file's name; '' unknown."
    )
    counter_reset = models.BooleanField(default=False, help_text="The engine restarted within the window.")
    predicted_n = models.BigIntegerField(null=True, blank=True)
    predicted_seconds = models.FloatField(null=True, blank=True)
    predicted_per_second = models.FloatField(null=True, blank=True, help_text="Decode tok/s over the window.")
    drafts = models.BigIntegerField(null=True, blank=True)
    draft_tokens = models.BigIntegerField(null=True, blank=True)
    accepted_tokens = models.BigIntegerField(null=True, blank=True)
    accepted_per_position = models.JSONField(null=True, blank=True, help_text="Accepted tokens by position.")
    flagged = models.JSONField(default=list, blank=True, help_text="Figures that contradict each other.")
    body = models.JSONField(help_text="The report as posted.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "report_id"], name="baselinereport_natural_key"),
        ]
        indexes = [models.Index(fields=["source_model", "received_at"], name="baseline_by_source")]

    def __str__(self) -> str:
        return f"{self.engine} {self.source_model} {self.report_id}"


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


class Rollup(models.Model):
    """Report figures added up per revision x node x stage split x strategy (requested, effective) x
    MTP used x topology x time bucket.

    Written by packages_app.rollups in the transaction that stores the reports (so each report is
    counted exactly once), read by throughput.py instead of the raw reports. Grains: ``hour`` (kept
    for MESHDASH_ROLLUP_HOURLY_DAYS), ``day`` (kept for good) and ``total`` (one bucket, the whole
    life of the revision); ``node_key`` is the node's id (no foreign key: 0 must be storable), or
    ALL_NODES for the figures of every node together, which is what the pages read. Sketches:
    packages_app.sketch, as JSON.
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


class TrackRequest(models.Model):
    """An operator asked to track a repo no catalog row holds yet: the worker asks the Hub whether it
    exists (one call) before a Package row is stored. Deleted once the package is tracked; a repo the
    Hub does not know stays here as ``missing``, so the ingest page says so."""

    class Status(models.TextChoices):
        CHECKING = "checking"
        MISSING = "missing"
        FAILED = "failed"

    repo_id = models.CharField(max_length=96, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CHECKING)
    message = models.CharField(max_length=500, blank=True)
    requested_at = models.DateTimeField()
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"{self.repo_id} ({self.status})"


class ActionLog(models.Model):
    """Who did what: one row per operator action (track, untrack, delete, re-ingest, node changes)."""

    class Action(models.TextChoices):
        TRACK = "track"
        UNTRACK = "untrack"
        DELETE = "delete"
        REINGEST = "reingest"
        NODE_CREATE = "node-create"
        NODE_REVOKE = "node-revoke"
        NODE_ROTATE = "node-rotate"
        PROPOSE_FIX = "propose-fix"
        SYNC = "sync"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # Kept as text too, so the record survives the account's deletion.
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=Action.choices)
    target = models.CharField(max_length=200, help_text="The repo id or node name acted on.")
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.target}"


class NotificationChannel(models.Model):
    """Where alerts go (admin-managed): a webhook (generic JSON, or the Slack/Discord "text" shape) or email.

    Webhook bodies are signed: ``X-Meshdash-Signature: sha256=<hex HMAC of the body with the secret>``.
    """

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "webhook (generic JSON)"
        SLACK = "slack", "webhook (Slack / Discord-compatible)"
        EMAIL = "email", "email"

    class Event(models.TextChoices):
        REVISION_WORSE = "revision-worse", "a tracked package gets a revision whose headline is worse"
        NODE_SERVING = "node-serving", "a node starts serving a refused, uncertified or MTP-unused revision"
        INGEST_STUCK = "ingest-stuck", "a revision has waited over an hour for its ingest"
        NODE_SILENT = "node-silent", "a node that reported in the last day stopped reporting"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.WEBHOOK)
    url = models.URLField(max_length=500, blank=True, help_text="Webhooks: where to POST.")
    secret = models.CharField(
        max_length=200, blank=True, help_text="Webhooks: the HMAC-SHA256 key of X-Meshdash-Signature."
    )
    emails = models.CharField(max_length=500, blank=True, help_text="Email: addresses, comma-separated.")
    events = models.JSONField(default=list, help_text="The events sent here (see Event).")
    allow_private = models.BooleanField(
        default=False,
        help_text="Let the webhook reach a loopback or private address (an in-house receiver).",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Notification(models.Model):
    """One event, once: ``key`` names it (e.g. ``node-serving:<node>:<revision>:<cause>``), so a re-run,
    a retry or two racing workers that see the same event record it once, and it is sent once."""

    key = models.CharField(max_length=200, unique=True)
    event = models.CharField(max_length=16, choices=NotificationChannel.Event.choices)
    title = models.CharField(max_length=300)
    payload = models.JSONField(help_text="The generic JSON body sent to webhooks.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return self.key


class NotificationDelivery(models.Model):
    """One notification to one channel: sent at most once (the task claims it; a sent one is skipped)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Set while one worker sends it (no transaction is held open during the POST): another worker that
    # gets the same message (a redelivery) leaves it alone until then.
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["notification", "channel"], name="delivery_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.notification_id}->{self.channel_id}:{self.status}"


class FixProposal(models.Model):
    """A pull request meshdash opens on the Hub with a revision's patched manifest, and what became of it.

    At most one is opening or open per package and base revision (the constraint); a second attempt gets
    that one back. ``promised_headline`` is what the patched manifest audits to on the base revision's
    weights; once the PR is merged and its revision ingested, ``landed_headline`` is what it audited to
    and ``mismatch`` says whether the two differ.
    """

    class Status(models.TextChoices):
        OPENING = "opening"  # recorded; the task has not opened it on the Hub yet
        OPEN = "open"
        MERGED = "merged"
        CLOSED = "closed"
        STALE = "stale"  # the head moved before it was sent: re-audited, nothing sent
        FAILED = "failed"  # the Hub refused it, or it would not validate: nothing open
        UNNEEDED = "unneeded"  # the Hub already holds the patched manifest: nothing to change, nothing sent

    ACTIVE = (Status.OPENING, Status.OPEN)

    package = models.ForeignKey(Package, on_delete=models.CASCADE, related_name="fix_proposals")
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="fix_proposals")
    base_sha = models.CharField(max_length=40)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPENING, db_index=True)
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    pr_url = models.CharField(max_length=500, blank=True)
    pr_head_sha = models.CharField(max_length=40, blank=True)
    title = models.CharField(max_length=300)
    description = models.TextField()
    diff = models.TextField()
    manifest = models.TextField(help_text="The patched model-package.json, as sent.")
    package_id_before = models.CharField(max_length=200, blank=True)
    package_id_after = models.CharField(max_length=200, blank=True)
    promised_headline = models.CharField(max_length=32)
    author = models.CharField(max_length=150, help_text="Whose token opens it (the Hub's PR author).")
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.TextField(blank=True, help_text="What happened last (a refusal, a re-audit).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    merge_commit = models.CharField(max_length=40, blank=True)
    landed_revision = models.ForeignKey(
        Revision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    landed_headline = models.CharField(max_length=32, blank=True)
    mismatch = models.BooleanField(null=True, help_text="Landed headline differs from the promised one.")
    verdict_comment_id = models.CharField(
        max_length=64, blank=True, help_text="The Hub's id of meshdash's comment with the landed verdict."
    )
    reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["package", "base_sha"],
                condition=models.Q(status__in=["opening", "open"]),
                name="one_active_fix_per_base",
            )
        ]

    def __str__(self) -> str:
        return f"{self.package.repo_id} {self.summary}"

    @property
    def summary(self) -> str:
        """One line for the package page and the catalog row: "fix proposed: PR #3 (open)", and once its merge
        is ingested "fix merged: PR #3 landed as 1a2b3c4d: serves with MTP, as promised"."""
        if self.status == self.Status.OPENING:
            return "fix proposed: opening a pull request on the Hub"
        if self.status == self.Status.UNNEEDED:
            return "fix not needed: the Hub already holds the patched manifest"
        if self.pr_number is None:
            return f"fix not proposed ({self.status})"
        if not self.landed_headline:
            return f"fix proposed: PR #{self.pr_number} ({self.status})"
        landed = verdicts.status_of(self.landed_headline).label
        promised = verdicts.status_of(self.promised_headline).label
        line = f"fix merged: PR #{self.pr_number} landed as {self.merge_commit[:8]}: {landed}"
        return line + (f", not the promised {promised}" if self.mismatch else ", as promised")


class CertifyReport(models.Model):
    """A ``mesh-llm models certify`` report (audit.certify_report; docs/rules.md section 6b): mesh-llm's own
    "did this package load and answer", for the package bytes it names by ``manifest_sha256``. Kept whether or
    not meshdash tracks those bytes: the revision holding them is found by that digest when read."""

    class Via(models.TextChoices):
        IMPORT = "import", "manage.py import_certify"
        API = "api", "POST /api/v1/certify-reports"

    digest = models.CharField(max_length=64, unique=True, help_text="sha256 of the report's canonical JSON.")
    manifest_sha256 = models.CharField(max_length=64, db_index=True)
    status = models.CharField(max_length=16, help_text="passed | failed | incomplete | not_required")
    failed_gate = models.CharField(max_length=100, blank=True)
    summary = models.CharField(max_length=300, help_text="passed, or failed at <gate>")
    model_id = models.CharField(max_length=300, blank=True)
    resolved_package_ref = models.CharField(max_length=500, blank=True)
    layer_count = models.PositiveIntegerField(default=0)
    certified_by = models.CharField(max_length=150, help_text="The node or user that handed it in.")
    via = models.CharField(max_length=8, choices=Via.choices)
    received_at = models.DateTimeField()
    body = models.JSONField(help_text="The report as handed in.")

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.model_id or self.manifest_sha256[:12]}: {self.summary}"
