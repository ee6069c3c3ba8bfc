"""Django admin. Node/report and package/revision/file admin are kept in separate sections below.

List pages never load the large JSON columns (manifest, audit, GGUF kv and tensors); change pages show
them as capped text; deleting a package lists counts, not its 200,000 files. Operator actions taken
here are written to the action log, like those taken on the dashboard.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from packages_app.models import (
    ActionLog,
    BaselineReport,
    FixProposal,
    Node,
    NodeRun,
    Notification,
    NotificationChannel,
    Package,
    PackageFile,
    Report,
    Revision,
    TrackRequest,
)
from packages_app.nodes import identity as nodes
from packages_app.web import access

# The admin's own login page counts failures against the same username and address as the site's.
admin.site.login_form = access.ThrottledAdminAuthenticationForm
# Branded as the dashboard it administers, not Django's stock "Django administration"; "View site" leads
# back to the catalog.
admin.site.site_header = "meshdash administration"
admin.site.site_title = "meshdash admin"
admin.site.index_title = "Nodes, packages and operators"
admin.site.site_url = "/"

# What a change page shows of one JSON column; the rest is cut with a note (the data stays stored).
JSON_PREVIEW_CHARS = 20_000
_REVISION_HEAVY = ("manifest_bytes", "manifest_json", "audit")


def json_preview(value: object) -> str:
    """Pretty JSON cut at JSON_PREVIEW_CHARS; a value too deep to print says so instead of failing."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return "(too deeply nested to show)"
    if len(text) <= JSON_PREVIEW_CHARS:
        return text
    return text[:JSON_PREVIEW_CHARS] + f"\n... cut: {len(text) - JSON_PREVIEW_CHARS} more characters"


# --- Nodes and their reports ------------------------------------------------------------------

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    NodeAdminBase = admin.ModelAdmin[Node]
    ReportAdminBase = admin.ModelAdmin[Report]
    NodeRunAdminBase = admin.ModelAdmin[NodeRun]
    BaselineAdminBase = admin.ModelAdmin[BaselineReport]
else:
    NodeAdminBase = ReportAdminBase = NodeRunAdminBase = BaselineAdminBase = admin.ModelAdmin


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
        access.record(request.user, ActionLog.Action.NODE_CREATE, obj.name)
        _show_token(request, obj, token)

    @admin.action(description="Revoke the selected nodes' tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            nodes.revoke_node(node)
            access.record(request.user, ActionLog.Action.NODE_REVOKE, node.name)
        self.message_user(request, f"Revoked {len(queryset)} node token(s).", messages.SUCCESS)

    @admin.action(description="Rotate the selected nodes' tokens (shows the new ones once)")
    def rotate_tokens(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            _show_token(request, node, nodes.rotate_node_token(node).token)
            access.record(request.user, ActionLog.Action.NODE_ROTATE, node.name)


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


@admin.register(BaselineReport)
class BaselineReportAdmin(BaselineAdminBase):
    """Windows of a baseline engine's counters (POST /api/v1/baselines): read only, like the reports."""

    list_display = (
        "received_at",
        "node",
        "engine",
        "engine_version",
        "source_model",
        "quantization",
        "predicted_per_second",
        "drafts",
        "counter_reset",
    )
    list_filter = ("engine", "quantization", "counter_reset", "node")
    list_select_related = ("node",)
    search_fields = ("report_id", "source_model", "source_file")
    date_hierarchy = "received_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: BaselineReport | None = None) -> bool:
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

    list_display = ("repo_id", "tracked", "private", "latest_revision", "last_synced_at", "sync_error")
    list_filter = ("tracked", "private")
    search_fields = ("repo_id",)
    list_select_related = ("latest_revision__package",)
    fields = (
        "repo_id",
        "tracked",
        "private",
        "latest_revision",
        "created_at",
        "last_synced_at",
        "sync_error",
    )
    readonly_fields = ("private", "latest_revision", "created_at", "last_synced_at", "sync_error")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Package]:
        heavy = [f"latest_revision__{name}" for name in _REVISION_HEAVY]
        return super().get_queryset(request).defer(*heavy)

    def get_deleted_objects(
        self, objs: Sequence[Package] | QuerySet[Package], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """Counts instead of one line per file: the stock page listed all 200,000 files of a package."""
        ids = [p.pk for p in objs]
        counts = {
            "packages": len(ids),
            "revisions": Revision.objects.filter(package_id__in=ids).count(),
            "package files": PackageFile.objects.filter(revision__package_id__in=ids).count(),
        }
        summary = [f"{p.repo_id}, with all its revisions and files" for p in objs]
        return summary, counts, set(), []

    def delete_model(self, request: HttpRequest, obj: Package) -> None:
        super().delete_model(request, obj)
        access.record(request.user, ActionLog.Action.DELETE, obj.repo_id, "from the admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Package]) -> None:
        names = list(queryset.values_list("repo_id", flat=True))
        super().delete_queryset(request, queryset)
        for name in names:
            access.record(request.user, ActionLog.Action.DELETE, name, "from the admin")


@admin.register(Revision)
class RevisionAdmin(RevisionAdminBase):
    list_display = ("__str__", "committed_at", "status", "verdict", "architecture", "files_done")
    list_filter = ("status", "verdict", "schema_version", "mtp_detected", "mtp_declared")
    search_fields = ("package__repo_id", "commit_sha", "manifest_sha256")
    list_select_related = ("package",)
    raw_id_fields = ("package",)
    date_hierarchy = "committed_at"
    # The manifest and the audit are large and owned by ingest; shown capped, never edited or listed.
    exclude = _REVISION_HEAVY
    readonly_fields = ("manifest_preview", "audit_preview", "audited_at", "claim_token")
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Revision]:
        return super().get_queryset(request).defer(*_REVISION_HEAVY)

    @admin.display(description="manifest (parsed)")
    def manifest_preview(self, obj: Revision) -> str:
        return json_preview(obj.manifest_json)

    @admin.display(description="audit")
    def audit_preview(self, obj: Revision) -> str:
        return json_preview(obj.audit)


@admin.register(PackageFile)
class PackageFileAdmin(PackageFileAdminBase):
    list_display = ("path", "revision", "role", "layer_index", "size", "header_status")
    list_filter = ("role", "header_status")
    search_fields = ("path", "revision__commit_sha", "revision__package__repo_id", "lfs_sha256")
    list_select_related = ("revision__package",)
    raw_id_fields = ("revision",)
    exclude = ("kv", "tensors")
    readonly_fields = ("kv_preview", "tensors_preview")
    # Counting 200,000 rows twice per page (filtered and total) is what a large package cannot afford.
    show_full_result_count = False
    # The natural key's index: ordering by path alone sorts every file of every revision per page.
    ordering = ("revision_id", "path")

    def get_queryset(self, request: HttpRequest) -> QuerySet[PackageFile]:
        heavy = [f"revision__{name}" for name in _REVISION_HEAVY]
        return super().get_queryset(request).defer("kv", "tensors", *heavy)

    @admin.display(description="KV metadata")
    def kv_preview(self, obj: PackageFile) -> str:
        return json_preview(obj.kv)

    @admin.display(description="tensors")
    def tensors_preview(self, obj: PackageFile) -> str:
        return json_preview(obj.tensors)


if TYPE_CHECKING:
    ActionLogAdminBase = admin.ModelAdmin[ActionLog]
else:
    ActionLogAdminBase = admin.ModelAdmin


@admin.register(ActionLog)
class ActionLogAdmin(ActionLogAdminBase):
    """Who did what; written by the dashboard and the admin, never edited."""

    list_display = ("at", "username", "action", "target", "detail")
    list_filter = ("action",)
    search_fields = ("username", "target")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ActionLog | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ActionLog | None = None) -> bool:
        return False


# --- Notifications ------------------------------------------------------------------------------------

if TYPE_CHECKING:
    ChannelAdminBase = admin.ModelAdmin[NotificationChannel]
    NotificationAdminBase = admin.ModelAdmin[Notification]
else:
    ChannelAdminBase = NotificationAdminBase = admin.ModelAdmin

TEST_SEND = "_test_send"  # the change page's "Save and send a test message" button
TEST_SENDS_FOR = 20.0  # seconds of test sends one admin request starts (each ends within its own 10 s)


class NotificationChannelForm(forms.ModelForm):  # type: ignore[type-arg]
    events = forms.MultipleChoiceField(
        choices=NotificationChannel.Event.choices, widget=forms.CheckboxSelectMultiple, required=False
    )
    url = forms.URLField(
        label="URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="Webhooks: where to POST.",
    )

    clear_secret = forms.BooleanField(required=False, help_text="Remove the secret: messages go unsigned.")

    class Meta:
        model = NotificationChannel
        fields = (
            "name",
            "enabled",
            "kind",
            "events",
            "url",
            "secret",
            "clear_secret",
            "allow_private",
            "emails",
        )
        # Never sent back to the browser (issue 48: the page carried it in clear); blank keeps the one set.
        widgets = {"secret": forms.PasswordInput(render_value=False)}

    def clean_secret(self) -> str:
        given = str(self.cleaned_data.get("secret") or "")
        if self.data.get("clear_secret"):
            return ""
        return given or (self.instance.secret if self.instance.pk else "")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        kind = data.get("kind")
        if kind == NotificationChannel.Kind.EMAIL:
            emails = [a.strip() for a in (data.get("emails") or "").split(",") if a.strip()]
            if not emails:
                self.add_error("emails", "Name at least one address.")
            for address in emails:
                try:
                    validate_email(address)
                except ValidationError:
                    self.add_error("emails", f"{address!r} is not an email address.")
        elif not data.get("url"):
            self.add_error("url", "A webhook needs the URL to POST to.")
        return data


def shown_url(url: str) -> str:
    """A receiver's URL without what may be its credentials: the user and password, the path and the query
    (a Slack or Discord webhook URL's path is its token)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "" if not url else "(set)"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port else ""
    rest = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{port}{rest}"


@admin.register(NotificationChannel)
class NotificationChannelAdmin(ChannelAdminBase):
    form = NotificationChannelForm
    list_display = ("name", "kind", "enabled", "events", "receiver", "emails")
    actions = ("send_test_message",)
    change_form_template = "admin/packages_app/notificationchannel/change_form.html"

    @admin.display(description="URL")
    def receiver(self, obj: NotificationChannel) -> str:
        return shown_url(obj.url)

    @admin.display(description="secret")
    def secret_state(self, obj: NotificationChannel) -> str:
        return "set" if obj.secret else "not set"

    def get_fields(
        self, request: HttpRequest, obj: NotificationChannel | None = None
    ) -> list[str | list[str] | tuple[str, ...] | tuple[()]]:
        fields = list(super().get_fields(request, obj))
        if obj is None or self.has_change_permission(request, obj):
            return fields
        # Staff who may only view: the URL without its credentials, whether a secret is set, not the secret.
        swap: dict[str, str] = {"url": "receiver", "secret": "secret_state"}
        return [
            swap.get(name, name) if isinstance(name, str) else name
            for name in fields
            if name != "clear_secret"
        ]

    def get_readonly_fields(
        self, request: HttpRequest, obj: NotificationChannel | None = None
    ) -> list[str] | tuple[str, ...]:
        if obj is not None and not self.has_change_permission(request, obj):
            return ("receiver", "secret_state")
        return super().get_readonly_fields(request, obj)

    @admin.action(description="Send a test message")
    def send_test_message(self, request: HttpRequest, queryset: QuerySet[NotificationChannel]) -> None:
        # Each send ends within its own deadline; no new one starts past TEST_SENDS_FOR, so the request
        # ends well inside gunicorn's 60 s however many channels are selected.
        started = time.monotonic()
        for channel in queryset:
            if time.monotonic() - started > TEST_SENDS_FOR:
                messages.warning(request, f"{channel.name}: not sent, the test sends ran out of time.")
                continue
            _test_send(request, channel)

    def response_change(self, request: HttpRequest, obj: NotificationChannel) -> HttpResponse:
        if TEST_SEND in request.POST:
            _test_send(request, obj)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def response_add(
        self, request: HttpRequest, obj: NotificationChannel, post_url_continue: str | None = None
    ) -> HttpResponse:
        if TEST_SEND in request.POST:
            _test_send(request, obj)
            return HttpResponseRedirect(
                reverse("admin:packages_app_notificationchannel_change", args=[obj.pk])
            )
        return super().response_add(request, obj, post_url_continue)


def _test_send(request: HttpRequest, channel: NotificationChannel) -> None:
    """Send now, within the test send's deadline over the whole exchange (10 s, under gunicorn's timeout),
    and say what happened (an operator is waiting for it)."""
    # Imported here: the web process loads the outbound client (packages_app.hub) only when it sends.
    from packages_app import notifications
    from packages_app.hub.outbound import DeliveryFailed

    try:
        notifications.send(
            channel, notifications.test_notification(channel), "test", notifications.TEST_SEND_LIMITS
        )
    except DeliveryFailed as exc:
        messages.error(request, f"{channel.name}: the test message was not delivered: {exc}")
        return
    messages.success(request, f"{channel.name}: the test message was delivered.")


@admin.register(Notification)
class NotificationAdmin(NotificationAdminBase):
    list_display = ("created_at", "event", "title")
    list_filter = ("event",)
    readonly_fields = ("key", "event", "title", "payload", "created_at", "delivery_states")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False

    @admin.display(description="deliveries")
    def delivery_states(self, obj: Notification) -> str:
        rows = obj.deliveries.select_related("channel").order_by("pk")
        return "; ".join(
            f"{d.channel.name}: {d.status} after {d.attempts} attempt(s) {d.error}" for d in rows
        )


if TYPE_CHECKING:
    FixProposalAdminBase = admin.ModelAdmin[FixProposal]
else:
    FixProposalAdminBase = admin.ModelAdmin


@admin.register(FixProposal)
class FixProposalAdmin(FixProposalAdminBase):
    """The pull requests meshdash opened with a patched manifest; read-only (the Hub holds the PR)."""

    list_display = (
        "created_at",
        "package",
        "pr_number",
        "status",
        "promised_headline",
        "landed_headline",
        "mismatch",
    )
    list_filter = ("status", "mismatch")
    search_fields = ("package__repo_id", "base_sha")
    list_select_related = ("package",)
    raw_id_fields = ("package", "revision", "landed_revision", "proposed_by")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: FixProposal | None = None) -> bool:
        return False


if TYPE_CHECKING:
    TrackRequestAdminBase = admin.ModelAdmin[TrackRequest]
else:
    TrackRequestAdminBase = admin.ModelAdmin


@admin.register(TrackRequest)
class TrackRequestAdmin(TrackRequestAdminBase):
    """Repos asked to be tracked that the Hub has not confirmed (checking, missing, check failed); the worker
    writes them. Deleting a ``missing`` one clears it from the Ingest page; nothing here is edited by hand."""

    list_display = ("requested_at", "repo_id", "status", "message", "checked_at")
    list_filter = ("status",)
    search_fields = ("repo_id",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: TrackRequest | None = None) -> bool:
        return False
