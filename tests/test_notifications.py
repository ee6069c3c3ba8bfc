"""Alerts that reach people: a local webhook receiver gets one signed message per event, from a task after
the commit; the outbound guard refuses private addresses unless the channel allows them; a receiver that
hangs never holds up a node's report; retries back off; the admin's test send."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.cache import cache
from django.db import OperationalError
from django.test import Client

from packages_app import background, notifications, tasks
from packages_app.devhub import QWEN35_FIRST_SHA, QWEN35_REPO, DevHub
from packages_app.hub.outbound import DeliveryFailed, OutboundLimits, post
from packages_app.models import (
    Notification,
    NotificationChannel,
    NotificationDelivery,
    Package,
    Revision,
)
from packages_app.nodes import identity as nodes
from packages_app.verdicts import Status

SECRET = "receiver-shared-secret"


@dataclass
class Receiver:
    """A webhook receiver on loopback: records each POST; ``statuses`` answers in turn (then 200);
    with ``hold`` set it does not answer until ``release`` is set."""

    statuses: list[int] = field(default_factory=list)
    hold: bool = False
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append((dict(self.headers.items()), body))
                receiver.arrived.set()
                if receiver.hold:
                    receiver.release.wait(60)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                # The sender's timeout may have closed it first: that is the point of a hold.
                with contextlib.suppress(BrokenPipeError):
                    self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def eager_background(settings: Any, eager_tasks: None) -> Iterator[None]:
    """No broker: tasks run in-process, and the report API hands its checks to the background threads."""
    settings.CELERY_BROKER_URL = ""
    cache.clear()
    yield
    assert background.wait_idle(90) and tasks.wait_eager_deliveries(90)


def channel(receiver: Receiver, *events: str, **fields: Any) -> NotificationChannel:
    values: dict[str, Any] = {
        "name": f"hook-{uuid.uuid4().hex[:6]}",
        "kind": NotificationChannel.Kind.WEBHOOK,
        "url": receiver.url,
        "secret": SECRET,
        "events": list(events) or [NotificationChannel.Event.NODE_SERVING],
        "allow_private": True,  # the receiver is on loopback
    }
    return NotificationChannel.objects.create(**(values | fields))


def report_body(n: int = 0) -> dict[str, Any]:
    return {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN35_REPO, "revision": QWEN35_FIRST_SHA},
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "disabled",
            "mtp_source": "Disabled",
        },
        "timings": {"predicted_n": 256 + n, "predicted_ms": 80757.0, "predicted_per_second": 3.17},
    }


def post_reports(token: str, n: int = 1) -> Any:
    return Client().post(
        "/api/v1/reports/batch",
        json.dumps({"reports": [report_body(i) for i in range(n)]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def verified(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-Meshdash-Signature", ""), expected)


# --- the demo's Qwen3.5 node starts serving 69cbd9fc ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_node_starting_to_serve_69cbd9fc_posts_one_signed_message_to_the_receiver(
    hub_settings: DevHub, eager_background: None, receiver: Receiver
) -> None:
    tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    channel(receiver)
    token = nodes.create_node("qwen35-node").token
    assert post_reports(token, 2).status_code == 200
    assert background.wait_idle(60) and receiver.arrived.wait(10)
    for _ in range(2):  # more reports of the same revision, after the per-minute throttle: no new message
        cache.clear()
        assert post_reports(token).status_code == 200
        assert background.wait_idle(60)
    assert tasks.wait_eager_deliveries(60)
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    assert verified(headers, body) and not verified(headers, body, "another-secret")
    message = json.loads(body)
    assert message["event"] == "node-serving" and message["node"] == "qwen35-node"
    assert message["revision"] == QWEN35_FIRST_SHA and message["repo_id"] == QWEN35_REPO
    assert message["cause"] in ("refused-by-release", "uncertified-override", "mtp-unused")
    assert headers["X-Meshdash-Event"] == "node-serving"
    delivery = NotificationDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("sent", 1)


@pytest.mark.django_db
def test_no_channel_for_the_event_records_nothing(hub_settings: DevHub, eager_tasks: None) -> None:
    tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    node = nodes.create_node("n").node
    post_reports(nodes.create_node("m").token)
    assert notifications.node_serving_events(node.pk) == []
    assert not Notification.objects.exists()


# --- a hostile or slow receiver --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_hanging_receiver_does_not_delay_a_nodes_reports(
    hub_settings: DevHub, eager_background: None, receiver: Receiver
) -> None:
    tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    channel(receiver)
    receiver.hold = True
    token = nodes.create_node("qwen35-node").token
    started = time.monotonic()
    assert post_reports(token).status_code == 200
    answered = time.monotonic() - started
    assert receiver.arrived.wait(30)  # the message went out, and the receiver is sitting on it...
    cache.clear()
    started = time.monotonic()
    assert post_reports(token).status_code == 200  # ...while the node's next report is answered
    second = time.monotonic() - started
    # The report's own checks end without the receiver (its delivery waits in the delivery pool); let them
    # end before this thread writes: the SQLite test database, in memory with a shared cache, refuses a
    # write while another thread's read holds the table ("database table is locked").
    assert background.wait_idle(30)
    # The task that follows an ingest finds a worse revision and hands its delivery off, not waiting either.
    channel(receiver, NotificationChannel.Event.REVISION_WORSE)
    started = time.monotonic()
    assert (
        tasks.notify_revision.apply(args=(two_revisions(Status.SERVES_MTP, Status.FAILS_AT_LOAD).pk,)).result
        == 1
    )
    after_ingest = time.monotonic() - started
    assert not receiver.release.is_set()  # all answered while the receiver still held its first request
    print(
        f"with the receiver hanging: reports answered in {answered * 1000:.0f} and {second * 1000:.0f} ms, "
        f"the post-ingest check in {after_ingest * 1000:.0f} ms"
    )
    receiver.hold = False
    receiver.release.set()
    assert background.wait_idle(60) and tasks.wait_eager_deliveries(60)
    assert set(NotificationDelivery.objects.values_list("status", flat=True)) == {"sent"}


def test_a_hanging_receiver_is_cut_by_the_read_timeout_as_a_retryable_failure(receiver: Receiver) -> None:
    receiver.hold = True
    limits = OutboundLimits(connect_timeout=1, read_timeout=0.5, deadline=2)
    with pytest.raises(DeliveryFailed) as failed:
        post(receiver.url, b"{}", {}, allow_private=True, limits=limits)
    assert failed.value.retryable and "no answer in time" in str(failed.value)


def test_a_private_address_is_refused_unless_the_channel_allows_it(receiver: Receiver) -> None:
    with pytest.raises(DeliveryFailed) as refused:
        post(receiver.url, b"{}", {})
    assert not refused.value.retryable and "refused to connect to 127.0.0.1" in str(refused.value)
    assert not receiver.received
    assert post(receiver.url, b"{}", {}, allow_private=True) == 200  # control: allowed, it goes through
    assert len(receiver.received) == 1


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.statuses = [302]
    with pytest.raises(DeliveryFailed) as refused:
        post(receiver.url, b"{}", {}, allow_private=True)
    assert not refused.value.retryable and "redirect" in str(refused.value)


# --- revision-worse, retries, shapes ---------------------------------------------------------------------


def two_revisions(first: Status, second: Status) -> Revision:
    package = Package.objects.create(repo_id="meshllm/Demo-layers")
    now = datetime.now(UTC)
    Revision.objects.create(
        package=package,
        commit_sha="a" * 40,
        committed_at=now - timedelta(days=1),
        status="done",
        headline=first,
    )
    new = Revision.objects.create(
        package=package, commit_sha="b" * 40, committed_at=now, status="done", headline=second
    )
    package.latest_revision = new
    package.save()
    return new


@pytest.mark.django_db(transaction=True)  # the deliveries are enqueued on commit
def test_a_worse_latest_revision_is_sent_once_and_a_better_one_not_at_all(
    eager_tasks: None, receiver: Receiver
) -> None:
    channel(receiver, NotificationChannel.Event.REVISION_WORSE)
    worse = two_revisions(Status.SERVES_MTP, Status.NOT_SERVABLE)
    assert tasks.notify_revision.apply(args=(worse.pk,)).result == 1
    assert tasks.wait_eager_deliveries(60)
    assert tasks.notify_revision.apply(args=(worse.pk,)).result == 0  # the same event again: nothing
    (headers, body), *rest = receiver.received
    assert not rest and verified(headers, body)
    message = json.loads(body)
    assert (message["headline"], message["previous_headline"]) == ("not-servable", "serves-mtp")
    Package.objects.all().delete()
    better = two_revisions(Status.MTP_UNUSED, Status.SERVES_MTP)
    assert tasks.notify_revision.apply(args=(better.pk,)).result == 0
    assert tasks.wait_eager_deliveries(60)


@pytest.mark.django_db(transaction=True)  # the deliveries are enqueued on commit
def test_a_receiver_that_fails_is_retried_until_it_takes_the_message(
    eager_tasks: None, receiver: Receiver
) -> None:
    channel(receiver, NotificationChannel.Event.REVISION_WORSE)
    receiver.statuses = [503, 500]
    worse = two_revisions(Status.SERVES_MTP, Status.FAILS_AT_LOAD)
    tasks.notify_revision.apply(args=(worse.pk,))
    assert tasks.wait_eager_deliveries(60)
    delivery = NotificationDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("sent", 3)
    assert len(receiver.received) == 3 and len({b for _, b in receiver.received}) == 1  # the same body


@pytest.mark.django_db(transaction=True)  # the deliveries are enqueued on commit
def test_a_locked_database_after_the_send_still_records_it_sent_and_sends_once(
    eager_tasks: None, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel(receiver, NotificationChannel.Event.REVISION_WORSE)
    worse = two_revisions(Status.SERVES_MTP, Status.FAILS_AT_LOAD)
    save, locked = NotificationDelivery.save, [2]

    def save_once_the_lock_is_gone(self: NotificationDelivery, *args: Any, **kwargs: Any) -> None:
        if self.status == "sent" and locked[0]:  # the status write after the POST
            locked[0] -= 1
            raise OperationalError("database table is locked: packages_app_notificationdelivery")
        save(self, *args, **kwargs)

    monkeypatch.setattr(NotificationDelivery, "save", save_once_the_lock_is_gone)
    tasks.notify_revision.apply(args=(worse.pk,))
    assert tasks.wait_eager_deliveries(60)
    delivery = NotificationDelivery.objects.get()
    # Before the fix: the retry found the row still claimed, answered "already sent", left it pending.
    assert (delivery.status, delivery.claimed_until) == ("sent", None)
    assert len(receiver.received) == 1 and locked == [0]


@pytest.mark.django_db(transaction=True)  # the deliveries are enqueued on commit
def test_a_receiver_that_refuses_with_4xx_is_not_retried(eager_tasks: None, receiver: Receiver) -> None:
    channel(receiver, NotificationChannel.Event.REVISION_WORSE)
    receiver.statuses = [404]
    tasks.notify_revision.apply(args=(two_revisions(Status.SERVES_MTP, Status.FAILS_AT_LOAD).pk,))
    assert tasks.wait_eager_deliveries(60)
    delivery = NotificationDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.error) == ("failed", 1, "the receiver answered 404")


@pytest.mark.django_db(transaction=True)  # the deliveries are enqueued on commit
def test_a_slack_channel_gets_the_text_shape_and_email_gets_a_mail(
    eager_tasks: None, receiver: Receiver
) -> None:
    channel(receiver, NotificationChannel.Event.REVISION_WORSE, kind=NotificationChannel.Kind.SLACK)
    NotificationChannel.objects.create(
        name="ops-mail",
        kind=NotificationChannel.Kind.EMAIL,
        emails="ops@example.org, oncall@example.org",
        events=[NotificationChannel.Event.REVISION_WORSE],
    )
    tasks.notify_revision.apply(args=(two_revisions(Status.SERVES_MTP, Status.MTP_UNUSED).pk,))
    assert tasks.wait_eager_deliveries(60)
    (_, body), *_ = receiver.received
    assert list(json.loads(body)) == ["text"] and "worse than aaaaaaaa" in json.loads(body)["text"]
    (sent,) = mail.outbox
    assert sent.to == ["ops@example.org", "oncall@example.org"] and "worse than" in sent.subject


# --- the admin ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admins_test_send_button_posts_a_signed_test_message(
    admin_client: Client, receiver: Receiver
) -> None:
    hook = channel(receiver)
    page = admin_client.get(f"/admin/packages_app/notificationchannel/{hook.pk}/change/")
    assert b'name="_test_send"' in page.content
    form = {
        "name": hook.name,
        "enabled": "on",
        "kind": "webhook",
        "events": ["node-serving"],
        "url": receiver.url,
        "secret": SECRET,
        "allow_private": "on",
        "emails": "",
        "_test_send": "Save and send a test message",
    }
    answer = admin_client.post(
        f"/admin/packages_app/notificationchannel/{hook.pk}/change/", form, follow=True
    )
    assert b"the test message was delivered" in answer.content
    (headers, body), *_ = receiver.received
    assert verified(headers, body) and json.loads(body)["event"] == "test"


@pytest.mark.django_db
def test_the_admin_says_why_a_test_send_failed(admin_client: Client, receiver: Receiver) -> None:
    hook = channel(receiver, allow_private=False)
    answer = admin_client.post(
        "/admin/packages_app/notificationchannel/",
        {"action": "send_test_message", "_selected_action": [hook.pk]},
        follow=True,
    )
    assert b"not delivered: refused to connect to 127.0.0.1" in answer.content
    assert not receiver.received


@pytest.mark.django_db
def test_the_admin_form_asks_for_what_each_kind_needs(admin_client: Client) -> None:
    answer = admin_client.post(
        "/admin/packages_app/notificationchannel/add/",
        {"name": "m", "kind": "email", "emails": "not-an-address", "events": ["node-serving"]},
    )
    assert b"is not an email address" in answer.content
    answer = admin_client.post(
        "/admin/packages_app/notificationchannel/add/", {"name": "w", "kind": "webhook", "events": []}
    )
    assert b"A webhook needs the URL to POST to." in answer.content
    assert not NotificationChannel.objects.exists()


# --- ingest stuck, node silent (beat) ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_ingest_stuck_for_an_hour_is_sent_once(eager_tasks: None, receiver: Receiver) -> None:
    channel(receiver, NotificationChannel.Event.INGEST_STUCK)
    package = Package.objects.create(repo_id="meshllm/Demo-layers")
    waiting = Revision.objects.create(package=package, commit_sha="c" * 40)
    assert tasks.notify_operations.apply().result == 0  # queued just now: not stuck
    Revision.objects.filter(pk=waiting.pk).update(queued_at=datetime.now(UTC) - timedelta(hours=3))
    assert tasks.notify_operations.apply().result == 1
    assert tasks.wait_eager_deliveries(60)
    assert tasks.notify_operations.apply().result == 0
    (headers, body), *rest = receiver.received
    assert not rest and verified(headers, body)
    message = json.loads(body)
    assert message["event"] == "ingest-stuck" and message["revision"] == "c" * 40
    assert message["waited_seconds"] >= 3 * 3600


@pytest.mark.django_db(transaction=True)
def test_a_node_that_stops_reporting_is_sent_once_per_silence(eager_tasks: None, receiver: Receiver) -> None:
    channel(receiver, NotificationChannel.Event.NODE_SILENT)
    node = nodes.create_node("quiet-node").node
    now = datetime.now(UTC)
    node.last_seen_at = now - timedelta(minutes=5)
    node.save()
    assert tasks.notify_operations.apply().result == 0  # five minutes: not silent yet
    for last_seen in (now - timedelta(minutes=30), now - timedelta(minutes=40)):
        node.last_seen_at = last_seen  # reported again, then fell silent again: a new event
        node.save()
        assert tasks.notify_operations.apply().result == 1
        assert tasks.wait_eager_deliveries(60)
        assert tasks.notify_operations.apply().result == 0
    assert [json.loads(body)["node"] for _, body in receiver.received] == ["quiet-node", "quiet-node"]
