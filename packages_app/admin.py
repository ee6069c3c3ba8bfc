"""Django admin. Node/report and package/revision/file admin are kept in separate sections below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from packages_app.models import Node, NodeRun, Package, PackageFile, Report, Revision
from packages_app.nodes import identity as nodes

# --- Nodes and their reports ------------------------------------------------------------------

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    NodeAdminBase = admin.ModelAdmin[Node]
    ReportAdminBase = admin.ModelAdmin[Report]
    NodeRunAdminBase = admin.ModelAdmin[NodeRun]
else:
    NodeAdminBase = ReportAdminBase = NodeRunAdminBase = admin.ModelAdmin


@admin.register(Node)
class NodeAdmin(NodeAdminBase):
    """Tokens are made here, shown once in a message, and stored only as digests."""

    list_display = (
        "name",
        "token_prefix",
        "created_at",
        "last_seen_at",
        "revoked_at",
        "rate_limit_per_minute",
    )
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "token_prefix")
    fields = ("name", "rate_limit_per_minute", "token_prefix", "created_at", "last_seen_at", "revoked_at")
    readonly_fields = ("token_prefix", "created_at", "last_seen_at", "revoked_at")
    actions = ("revoke_tokens", "rotate_tokens")

    def save_model(self, request: HttpRequest, obj: Node, form: ModelForm[Node], change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token = nodes.new_token()
        obj.token_hash, obj.token_prefix = nodes.hash_token(token), token[: nodes.PREFIX_CHARS]
        super().save_model(request, obj, form, change)
        _show_token(request, obj, token)

    @admin.action(description="Revoke the selected nodes' tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            nodes.node_revoke(node)
        self.message_user(request, f"Revoked {len(queryset)} node token(s).", messages.SUCCESS)

    @admin.action(description="Rotate the selected nodes' tokens (shows the new ones once)")
    def rotate_tokens(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            _show_token(request, node, nodes.node_rotate_token(node).token)


def _show_token(request: HttpRequest, node: Node, token: str) -> None:
    messages.warning(request, f"Token for {node.name} (copy it now, it is not shown again): {token}")


@admin.register(Report)
class ReportAdmin(ReportAdminBase):
    """Reports are what nodes said; the admin only reads them (and may delete)."""

    list_display = (
        "received_at",
        "node",
        "repo_id",
        "commit_sha",
        "effective_strategy",
        "mtp_source",
        "predicted_per_second",
        "mtp_used",
        "clock_skew_flagged",
    )
    list_filter = ("source", "mtp_used", "mtp_source", "effective_strategy", "clock_skew_flagged", "node")
    list_select_related = ("node",)
    search_fields = ("report_id", "repo_id", "commit_sha")
    raw_id_fields = ("revision",)
    date_hierarchy = "received_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Report | None = None) -> bool:
        return False


@admin.register(NodeRun)
class NodeRunAdmin(NodeRunAdminBase):
    """What each node's agent registered: run id -> package revision; read-only, like reports."""

    list_display = ("run_id", "node", "repo_id", "commit_sha", "stage_splits", "version", "updated_at")
    list_filter = ("node",)
    list_select_related = ("node",)
    search_fields = ("run_id", "repo_id", "commit_sha")
    raw_id_fields = ("revision",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: NodeRun | None = None) -> bool:
        return False


# --- Packages, revisions and files (read-mostly: ingest writes them) ---------------------------

if TYPE_CHECKING:
    PackageAdminBase = admin.ModelAdmin[Package]
    RevisionAdminBase = admin.ModelAdmin[Revision]
    PackageFileAdminBase = admin.ModelAdmin[PackageFile]
else:
    PackageAdminBase = RevisionAdminBase = PackageFileAdminBase = admin.ModelAdmin


@admin.register(Package)
class PackageAdmin(PackageAdminBase):
    """Tracking on/off is the one thing an operator edits; revisions come from ingest."""

    list_display = ("repo_id", "tracked", "latest_revision", "last_synced_at", "sync_error")
    list_filter = ("tracked",)
    search_fields = ("repo_id",)
    list_select_related = ("latest_revision__package",)
    fields = ("repo_id", "tracked", "latest_revision", "created_at", "last_synced_at", "sync_error")
    readonly_fields = ("latest_revision", "created_at", "last_synced_at", "sync_error")


@admin.register(Revision)
class RevisionAdmin(RevisionAdminBase):
    list_display = ("__str__", "committed_at", "status", "verdict", "architecture", "files_done")
    list_filter = ("status", "verdict", "schema_version", "mtp_detected", "mtp_declared")
    search_fields = ("package__repo_id", "commit_sha", "manifest_sha256")
    list_select_related = ("package",)
    raw_id_fields = ("package",)
    date_hierarchy = "committed_at"
    # The manifest bytes and the audit are large and owned by ingest; shown, never edited here.
    exclude = ("manifest_bytes",)
    readonly_fields = ("manifest_json", "audit", "audited_at", "claim_token")


@admin.register(PackageFile)
class PackageFileAdmin(PackageFileAdminBase):
    list_display = ("path", "revision", "role", "layer_index", "size", "header_status")
    list_filter = ("role", "header_status")
    search_fields = ("path", "revision__commit_sha", "revision__package__repo_id", "lfs_sha256")
    list_select_related = ("revision__package",)
    raw_id_fields = ("revision",)
    readonly_fields = ("kv", "tensors")
