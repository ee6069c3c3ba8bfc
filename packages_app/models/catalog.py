"""The catalog's tables: tracked packages, their pinned revisions and files, the operators' track requests,
and the mesh-llm certify reports kept by manifest sha256.
"""

from __future__ import annotations

from functools import cached_property

from django.db import models
from django.db.models import Q
from django.db.models.functions import Upper

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
    # The repo id upper-cased by the database, as a case-insensitive search upper-cases it (``icontains``:
    # UPPER(repo_id) LIKE UPPER(%q%)), stored once instead of upper-cased for every package on every search
    # (the catalog's search reads the whole catalog twice, for its counts and its rows: 5 ms each for the
    # catalog seed's 10,000 packages; catalog.filters.other_filters_q).
    repo_upper = models.GeneratedField(
        expression=Upper("repo_id"), output_field=models.CharField(max_length=96), db_persist=True
    )
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
    # The newest revision by commit date, kept here so the catalog needs no subquery per row (indexed
    # by Meta.indexes' package_latest_visible).
    latest_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The model card at the head, as the Hub parses it (hub.ModelCard; docs/rules.md section 6b, card.rs):
    # the source model the package was cut from, and the card's tags (mesh-llm's writer adds "experimental").
    base_model = models.CharField(max_length=200, blank=True, help_text="The card's base_model: the source.")
    card_tags = models.JSONField(
        default=list, blank=True, help_text="The card's tags, as the Hub lists them."
    )
    # The curated catalog dataset's rows listing this package (hub.CuratedCatalogRow.to_json), from discover.
    catalog_rows = models.JSONField(default=list, blank=True)

    objects = PackageQuerySet.as_manager()

    class Meta:
        ordering = ["repo_id"]
        indexes = [
            # The catalog's counts read every visible package's latest revision: from this index alone,
            # in the order of revision_facets' ids (a merge join, no hashing; catalog.facets).
            models.Index(
                fields=["latest_revision"], include=["id", "private"], name="package_latest_visible"
            ),
            # The packages a visitor is not shown (private, or not known to be public): few, and read on
            # every fleet page a visitor asks for (fleet.ranking._hidden_revisions): from this index, not
            # a scan of the whole catalog (1.0 ms each, three a /nodes/ page, on the catalog seed).
            models.Index(fields=["id"], condition=~Q(private=False), name="package_not_public"),
        ]
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
            # revision row (catalog.listing._packages_of).
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
