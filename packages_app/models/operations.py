"""The operators' tables: the action log, notification channels, notifications and their deliveries, and
fix pull requests proposed on the Hub.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from packages_app import verdicts
from packages_app.models.catalog import Package, Revision


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
