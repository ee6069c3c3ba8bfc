"""Service: alerts that reach people. Finds events, records each once, and delivers one to one channel.

Events (NotificationChannel.Event), judged by the one answer per revision (the assessment's headline,
verdicts.Status, and the per-node advice, verdicts.Cause):
- ``revision-worse``: a tracked package's new latest revision has a worse headline (a lower
  ``Status.rank``) than the revision before it;
- ``node-serving``: a node serves a revision its own release refuses, on an uncertified split
  override, or leaving MTP unused (fleet.nodes.node_rows' advice).

Each event has a key (``node-serving:<node id>:<revision id>:<cause>``), unique in the table, so a
second look at the same facts records nothing and sends nothing. Finding and recording return the
deliveries to send; the task enqueues them (services never enqueue). ``deliver`` claims its row under a
lock and skips one already sent, so a redelivered or retried task never sends twice what went through.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection, send_mail
from django.core.mail.backends import smtp
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from packages_app import metrics, monitoring
from packages_app.fleet.nodes import node_rows
from packages_app.hub.net import exchange_deadline
from packages_app.hub.outbound import BoundedSMTP, BoundedSMTPS, DeliveryFailed, OutboundLimits, post
from packages_app.models import Node, Notification, NotificationChannel, NotificationDelivery, Revision
from packages_app.verdicts import Cause, Status

log = logging.getLogger(__name__)

Event = NotificationChannel.Event
NODE_CAUSES = (Cause.REFUSED, Cause.UNCERTIFIED, Cause.MTP_UNUSED)
NODE_WINDOW = timedelta(hours=1)  # what a node served lately, when its reports arrive
SIGNATURE_HEADER = "X-Meshdash-Signature"
DELIVERY_LIMITS = OutboundLimits()  # a worker's POST or mail: 15 s for the whole exchange
TEST_SEND_LIMITS = OutboundLimits(deadline=10.0)  # the admin's test send: an operator's request is waiting
CLAIM_FOR = timedelta(seconds=DELIVERY_LIMITS.deadline + 45)  # the exchange (POST or mail), and slack
# A pending delivery whose claim ran out this long ago was being sent by a worker that stopped (killed,
# or its process lost); one never claimed this long after it was recorded lost its task. The periodic
# task (``stale_deliveries``) sends either again, or fails it once it has had its attempts.
STALE_AFTER = timedelta(minutes=10)
MAX_ATTEMPTS = 9  # the task's first try and its 8 retries (tasks.NOTIFY_MAX_RETRIES)


@dataclass(frozen=True)
class Found:
    key: str
    event: str
    title: str
    details: dict[str, object]


def channels_for(event: str) -> list[NotificationChannel]:
    return [c for c in NotificationChannel.objects.filter(enabled=True) if event in (c.events or [])]


def record(found: Found) -> list[int]:
    """Store the event once and a delivery per channel that wants it; the new deliveries' ids ([] when
    the event was recorded before, or no channel wants it)."""
    channels = channels_for(found.event)
    if not channels:
        return []
    payload = {"event": found.event, "key": found.key, "title": found.title, **found.details}
    try:
        with transaction.atomic():
            notification, created = Notification.objects.get_or_create(
                key=found.key[:200],
                defaults={"event": found.event, "title": found.title[:300], "payload": payload},
            )
            if not created:
                return []
            rows = [NotificationDelivery(notification=notification, channel=c) for c in channels]
            return [d.pk for d in NotificationDelivery.objects.bulk_create(rows)]
    except IntegrityError:  # a racing worker recorded it first
        return []


# --- finding events -----------------------------------------------------------------------------------


def revision_events(revision_id: int) -> list[int]:
    """``revision-worse`` for a tracked package's latest revision whose headline ranks below the
    revision before it (by commit time); the deliveries to send."""
    revision = Revision.objects.select_related("package").filter(pk=revision_id).first()
    if revision is None or not revision.package.tracked or revision.package.latest_revision_id != revision.pk:
        return []
    previous = (
        Revision.objects.filter(package=revision.package, status=Revision.Status.DONE)
        .exclude(pk=revision.pk)
        .exclude(headline="")
        .filter(committed_at__lt=revision.committed_at)
        .order_by("-committed_at")
        .first()
        if revision.committed_at
        else None
    )
    new, old = _status(revision.headline), _status(previous.headline if previous else "")
    if previous is None or new is None or old is None or new.rank >= old.rank:
        return []
    repo = revision.package.repo_id
    was, now = previous.commit_sha[:8], revision.commit_sha[:8]
    title = f"{repo}: {now} is worse than {was}: {old.label} -> {new.label}"
    details: dict[str, object] = {
        "repo_id": repo,
        "revision": revision.commit_sha,
        "headline": new.value,
        "previous_revision": previous.commit_sha,
        "previous_headline": old.value,
        "url": _link(f"/packages/{repo}/"),
    }
    return record(Found(f"revision-worse:{revision.pk}", Event.REVISION_WORSE, title, details))


def node_serving_events(node_id: int) -> list[int]:
    """``node-serving`` for each revision the node served lately whose advice is one of NODE_CAUSES."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None or not channels_for(Event.NODE_SERVING):
        return []
    since = timezone.now() - NODE_WINDOW
    deliveries: list[int] = []
    for row in node_rows(since, name=node.name, show_private=True):
        for serving in row.serving:
            cause = serving.advice.cause
            if cause not in NODE_CAUSES:
                continue
            title = f"{node.name} serves {serving.repo_id}@{serving.commit_sha[:8]}: {cause.label}"
            details: dict[str, object] = {
                "node": node.name,
                "repo_id": serving.repo_id,
                "revision": serving.commit_sha,
                "headline": serving.headline,
                "cause": cause.value,
                "advice": serving.advice.text,
                "url": _link(f"/nodes/{node.name}/"),
            }
            key = f"node-serving:{node.pk}:{serving.revision_id}:{cause.value}"
            deliveries += record(Found(key, Event.NODE_SERVING, title, details))
    return deliveries


STUCK_AFTER = timedelta(hours=1)


def operations_events(now: datetime | None = None) -> list[int]:
    """``ingest-stuck`` (once per oldest stuck revision) and ``node-silent`` (once per node per silence:
    a node that reports again and falls silent again is a new event); run by beat every few minutes."""
    now = now or timezone.now()
    return _ingest_stuck(now) + _nodes_silent(now)


def _ingest_stuck(now: datetime) -> list[int]:
    stuck = Revision.objects.filter(status=Revision.Status.QUEUED, queued_at__lt=now - STUCK_AFTER)
    oldest = stuck.select_related("package").order_by("queued_at").first()
    if oldest is None or not channels_for(Event.INGEST_STUCK):
        return []
    waited = now - oldest.queued_at
    title = (
        f"{stuck.count()} revision(s) waited over an hour for their ingest; the oldest, "
        f"{oldest.package.repo_id}@{oldest.commit_sha[:8]}, for {waited.total_seconds() / 3600:.1f} h"
    )
    details: dict[str, object] = {
        "repo_id": oldest.package.repo_id,
        "revision": oldest.commit_sha,
        "waited_seconds": int(waited.total_seconds()),
        "url": _link("/ingest/"),
    }
    return record(Found(f"ingest-stuck:{oldest.pk}", Event.INGEST_STUCK, title, details))


def _nodes_silent(now: datetime) -> list[int]:
    if not channels_for(Event.NODE_SILENT):
        return []
    silent = Node.objects.filter(
        revoked_at__isnull=True,
        last_seen_at__gte=now - monitoring.SILENT_WINDOW,
        last_seen_at__lt=now - monitoring.SILENT_AFTER,
    ).order_by("name")
    deliveries: list[int] = []
    for node in silent:
        assert node.last_seen_at is not None  # the filter above
        minutes = int((now - node.last_seen_at).total_seconds() // 60)
        title = f"{node.name} stopped reporting {minutes} minutes ago"
        details: dict[str, object] = {
            "node": node.name,
            "last_seen_at": node.last_seen_at.isoformat(),
            "url": _link(f"/nodes/{node.name}/"),
        }
        key = f"node-silent:{node.pk}:{int(node.last_seen_at.timestamp())}"
        deliveries += record(Found(key, Event.NODE_SILENT, title, details))
    return deliveries


def _status(headline: str) -> Status | None:
    try:
        return Status(headline)
    except ValueError:
        return None


def _link(path: str) -> str:
    base = settings.MESHDASH_PUBLIC_URL.rstrip("/")
    return f"{base}{path}" if base else path


# --- delivering -----------------------------------------------------------------------------------------


SENT, ALREADY, FAILED = "sent", "already-sent", "failed"
FINISH_ATTEMPTS = 6  # 0.1 + 0.2 + ... + 1.6 s of waiting at most


def deliver(delivery_id: int) -> str:
    """Send one delivery: ``sent``, ``already-sent`` (sent, or being sent by another worker) or
    ``failed`` (not worth retrying).

    Raises DeliveryFailed when trying later may work (a timeout, a 5xx, a 429): the task retries it.
    No transaction stays open during the POST (a slow receiver must not hold a lock others wait on):
    the row is claimed for the outbound deadline first, and a second worker skips a claimed row.
    """
    delivery = _claim(delivery_id)
    if delivery is None:
        return ALREADY
    try:
        send(delivery.channel, delivery.notification, delivery.pk)
    except DeliveryFailed as exc:
        delivery.error = str(exc)[:500]
        delivery.status = (
            NotificationDelivery.Status.PENDING if exc.retryable else NotificationDelivery.Status.FAILED
        )
        _finish(delivery, "retry" if exc.retryable else "failed")
        if exc.retryable:
            raise
        return FAILED
    delivery.status, delivery.sent_at, delivery.error = NotificationDelivery.Status.SENT, timezone.now(), ""
    _finish(delivery, "sent")
    return SENT


def _claim(delivery_id: int) -> NotificationDelivery | None:
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            NotificationDelivery.objects.select_for_update()
            .select_related("notification", "channel")
            .filter(pk=delivery_id, status=NotificationDelivery.Status.PENDING)
            .first()
        )
        if delivery is None or (delivery.claimed_until is not None and delivery.claimed_until > now):
            return None
        delivery.attempts += 1
        delivery.claimed_until = now + CLAIM_FOR
        delivery.save(update_fields=["attempts", "claimed_until"])
    return delivery


def _finish(delivery: NotificationDelivery, outcome: str) -> None:
    """Record how the send went. The message is already out: a database error here is retried a few times
    rather than raised, since a retry of the whole delivery would find the row still claimed and stop
    ("already sent") with the row left pending (SQLite's table locks between the delivery threads of
    the broker-less setup did exactly that)."""
    delivery.claimed_until = None
    for attempt in range(FINISH_ATTEMPTS):
        try:
            delivery.save(update_fields=["status", "sent_at", "error", "claimed_until"])
            break
        except OperationalError:
            if attempt == FINISH_ATTEMPTS - 1:
                raise
            time.sleep(0.1 * 2**attempt)
    metrics.NOTIFICATIONS.labels(delivery.channel.kind, outcome).inc()


def give_up(delivery_id: int, error: str) -> None:
    """The task's retries ran out: the delivery is failed, with the last error."""
    NotificationDelivery.objects.filter(pk=delivery_id, status=NotificationDelivery.Status.PENDING).update(
        status=NotificationDelivery.Status.FAILED, error=error[:500]
    )


def stale_deliveries(now: datetime | None = None) -> list[int]:
    """Pending deliveries no worker will finish: claimed by one that stopped before it recorded the
    outcome, or recorded and never claimed. Those with attempts left are released to be sent again (their
    ids returned, for the periodic task to enqueue); the rest are failed, naming why."""
    now = now or timezone.now()
    stale = NotificationDelivery.objects.filter(status=NotificationDelivery.Status.PENDING).filter(
        Q(claimed_until__lt=now - STALE_AFTER)
        | Q(claimed_until__isnull=True, attempts=0, notification__created_at__lt=now - STALE_AFTER)
    )
    spent = stale.filter(attempts__gte=MAX_ATTEMPTS)
    for delivery in spent:
        log.warning(
            "delivery %s failed: its worker stopped on the last of %s attempts", delivery.pk, MAX_ATTEMPTS
        )
    spent.update(
        status=NotificationDelivery.Status.FAILED,
        claimed_until=None,
        error=f"the worker sending it stopped on the last of {MAX_ATTEMPTS} attempts",
    )
    again = list(stale.filter(attempts__lt=MAX_ATTEMPTS).order_by("pk").values_list("pk", flat=True))
    NotificationDelivery.objects.filter(pk__in=again).update(claimed_until=None)
    return again


def send(
    channel: NotificationChannel,
    notification: Notification,
    delivery_id: int | str,
    limits: OutboundLimits | None = None,
) -> None:
    """One message to one channel (also the admin's test send, with its own ``limits``); DeliveryFailed
    when it did not go."""
    if channel.kind == NotificationChannel.Kind.EMAIL:
        _send_email(channel, notification, limits or DELIVERY_LIMITS)
        return
    body = webhook_body(channel, notification)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "meshdash-notifications",
        "X-Meshdash-Event": notification.event,
        "X-Meshdash-Delivery": str(delivery_id),
    }
    if channel.secret:
        headers[SIGNATURE_HEADER] = signature(channel.secret, body)
    post(channel.url, body, headers, allow_private=channel.allow_private, limits=limits or DELIVERY_LIMITS)


def webhook_body(channel: NotificationChannel, notification: Notification) -> bytes:
    if channel.kind == NotificationChannel.Kind.SLACK:
        url = notification.payload.get("url", "") if isinstance(notification.payload, dict) else ""
        data: dict[str, object] = {"text": f"{notification.title}\n{url}".strip()}
    else:
        data = dict(notification.payload) if isinstance(notification.payload, dict) else {}
    return json.dumps(data, sort_keys=True).encode()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class BoundedEmailBackend(smtp.EmailBackend):
    """Django's SMTP backend (``EMAIL_BACKEND``) on ``outbound.BoundedSMTP``: the whole exchange (connect,
    greeting, every reply, the message) ends at one deadline, ``deadline`` seconds (the deliveries' 15 s,
    the admin's test send's 10 s), as a webhook's POST does; ``EMAIL_TIMEOUT`` still bounds each socket
    operation inside it."""

    def __init__(self, *args: Any, deadline: float = DELIVERY_LIMITS.deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        return BoundedSMTPS if self.use_ssl else BoundedSMTP

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        with exchange_deadline(self.deadline):
            return super().send_messages(email_messages)


def _send_email(channel: NotificationChannel, notification: Notification, limits: OutboundLimits) -> None:
    recipients = [a.strip() for a in channel.emails.split(",") if a.strip()]
    if not recipients:
        raise DeliveryFailed("the channel names no email address", retryable=False)
    text = json.dumps(notification.payload, indent=2, sort_keys=True)
    connection = get_connection(deadline=limits.deadline)  # EMAIL_BACKEND: BoundedEmailBackend
    try:
        send_mail(f"[meshdash] {notification.title}", text, None, recipients, connection=connection)
    except OSError as exc:  # smtplib's errors are OSErrors: the mail server is down or refused
        raise DeliveryFailed(f"the mail server did not take it: {exc}", retryable=True) from None


def test_notification(channel: NotificationChannel) -> Notification:
    """An unsaved notification for the admin's test send."""
    title = f"meshdash test message to {channel.name}"
    payload = {"event": "test", "key": "test", "title": title, "url": _link("/")}
    return Notification(key="test", event="test", title=title, payload=payload)
