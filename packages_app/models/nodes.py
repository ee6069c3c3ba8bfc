"""The serving nodes' tables: each node, its reports (and their keys), its agent's runs and run claims, its
baseline engine reports, and its needing-action judgement kept per audience.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models.signals import post_save
from django.dispatch import receiver

from packages_app.models.catalog import Revision


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


class NodeRunQuerySet(models.QuerySet["NodeRun"]):
    def releases(self, revision_ids: Iterable[int]) -> models.QuerySet[NodeRun, tuple[int, int, str]]:
        """(revision, node, mesh-llm release) of each run of these revisions whose agent named its release,
        the oldest registration first: a dict of them keeps each node's newest. Read from the index
        noderun_revision_nodes alone, which carries the release and the registration's time (a run's row,
        with its stages and observations, fills a page of its own: at 10,000 nodes, 763 pages for the
        compare page's 1,752 runs)."""
        runs = self.filter(revision_id__in=revision_ids).exclude(version="").order_by("updated_at")
        return runs.values_list("revision_id", "node_id", "version")


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
    revision = models.ForeignKey(  # indexed by noderun_revision_nodes (Meta)
        Revision, null=True, blank=True, on_delete=models.SET_NULL, related_name="node_runs", db_index=False
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
        db_index=False,  # indexed by noderun_served_nodes (Meta)
        help_text="The tracked revision the node's own identity names (when it names one).",
    )
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NodeRunQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        constraints = [models.UniqueConstraint(fields=["node", "run_id"], name="noderun_natural_key")]
        # The nodes that registered a run of a revision, one index per way of registering
        # (rollups.public_weight.registered_nodes): read from the index alone, never the runs' rows. The
        # revision's also carries each run's release and time, for the releases read (releases above).
        indexes = [
            models.Index(
                fields=["revision", "node"], include=["version", "updated_at"], name="noderun_revision_nodes"
            ),
            models.Index(fields=["served_revision", "node"], name="noderun_served_nodes"),
            models.Index(fields=["repo_id", "commit_sha", "node"], name="noderun_named_nodes"),
            # Each node's newest run, read backwards from its last entry (fleet.runs.latest_runs).
            models.Index(fields=["node", "updated_at", "id"], name="noderun_node_newest"),
        ]

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


class NodeJudgement(models.Model):
    """Each node's judgement over the default window (fleet.window.DEFAULT_WINDOW_DAYS), kept rather than made
    per request: whether it needs action, its most urgent advice and the revision it is about, and the rank
    the needing-action list sorts it by, once for visitors (``private`` false: public packages only) and once
    for those who see private packages. Written by packages_app.judgements in the transaction of whatever
    changes it; ``valid_until`` is when the moving window changes it (a report leaving it, or its cells'
    strategies changing at the next hour), ``basis`` the release matrix and rosters it was judged against.
    ``manage.py rebuild_judgements`` writes the same rows from scratch."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="judgements")
    private = models.BooleanField(help_text="Judged with private packages' revisions shown.")
    node_name = models.CharField(max_length=100, help_text="Node.name, for the list's order.")
    needs_action = models.BooleanField(default=False)
    cause = models.CharField(max_length=32, blank=True, help_text="Its most urgent advice's cause, if any.")
    cause_rank = models.IntegerField(default=0, help_text="That cause's rank (the list's first sort key).")
    revision = models.ForeignKey(Revision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    advice = models.JSONField(default=dict, blank=True, help_text="That advice's fields (api advice_json).")
    valid_until = models.DateTimeField()
    basis = models.CharField(max_length=32, help_text="The release matrix and rosters it was judged against.")
    judged_at = models.DateTimeField(help_text="The clock it was judged at (the window's end).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "private"], name="judgement_one_per_node")]
        indexes = [
            # The needing-action list: its page of rows in order, read from the index.
            models.Index(
                fields=["private", "-needs_action", "cause_rank", "node_name"], name="judgement_ranked"
            ),
            # The rows to judge anew: the window moved past them, or the matrix changed.
            models.Index(fields=["valid_until"], name="judgement_expiry"),
            models.Index(fields=["judged_at"], name="judgement_clock"),
            models.Index(fields=["basis"], name="judgement_basis"),
        ]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.cause or 'nothing to do'}"


JUDGEMENT_EXPIRED = datetime(2000, 1, 1, tzinfo=UTC)  # a NodeJudgement the next read judges anew


@receiver(post_save, sender=Node, dispatch_uid="packages_app.models.node_judgements")
def node_judgements(sender: type[Node], instance: Node, raw: bool = False, **kwargs: Any) -> None:
    """A node created or renamed: its judgements (NodeJudgement, one per audience) expired, so the next
    read judges it (packages_app.judgements.fresh) and no node is missing from the list; a node's other
    fields (its token, when it was last seen) change no judgement."""
    if raw:
        return
    if kwargs.get("created"):
        rows = [
            NodeJudgement(
                node=instance,
                private=private,
                node_name=instance.name,
                valid_until=JUDGEMENT_EXPIRED,
                judged_at=JUDGEMENT_EXPIRED,
            )
            for private in (False, True)
        ]
        NodeJudgement.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["node", "private"],
            update_fields=["node_name", "valid_until"],
        )
        return
    renamed = NodeJudgement.objects.filter(node=instance).exclude(node_name=instance.name)
    renamed.update(node_name=instance.name, valid_until=JUDGEMENT_EXPIRED)
