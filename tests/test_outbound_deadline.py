"""A deadline on the whole outbound exchange (issue 48): a notification receiver that drips its headers a
byte at a time (each byte well inside the read timeout) is cut at the stated deadline, in a worker's delivery
and in the admin's test send; deliveries a stopped worker left ``pending`` are sent again or failed by the
periodic task. Each guard with its control."""

from __future__ import annotations

import contextlib
import contextvars
import http.server
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx2
import pytest
from django.test import Client
from django.utils import timezone
from huggingface_hub.utils import get_session

from packages_app import notifications, tasks
from packages_app.hub import net, outbound
from packages_app.hub.outbound import DeliveryFailed, OutboundLimits, post
from packages_app.models import Notification, NotificationChannel, NotificationDelivery

DRIP_SECONDS = 4.0  # the receiver drips for this long, then hangs up
LIMITS = OutboundLimits(connect_timeout=1, read_timeout=0.5, deadline=1.5)  # each byte comes in 0.1 s


class Loopback:
    """A server on a loopback port that hands each connection to ``handle`` in a thread of its own and
    counts the connections it served."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.connections = 0
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def drip(self, conn: socket.socket, opening: bytes) -> None:
        """Send ``opening``, then a byte every 0.1 s, never ending the line, for DRIP_SECONDS."""
        conn.sendall(opening)
        end = time.monotonic() + DRIP_SECONDS
        while time.monotonic() < end and not self.stop.is_set():
            conn.sendall(b"a")
            time.sleep(0.1)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


class Dripper(Loopback):
    """Takes a POST, answers ``HTTP/1.1 200 OK`` and then a header one byte every 0.1 s, never ending the
    headers, for DRIP_SECONDS."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            self.drip(conn, b"HTTP/1.1 200 OK\r\nX-Drip: ")


@pytest.fixture
def dripper() -> Iterator[Dripper]:
    d = Dripper()
    yield d
    d.close()


@pytest.fixture
def no_exchange_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard off: only the per-read timeout, as before issue 48 (an hour is no deadline here)."""
    guarded = outbound.exchange_deadline
    monkeypatch.setattr(outbound, "exchange_deadline", lambda seconds: guarded(3600))


def timed_post(url: str, limits: OutboundLimits) -> tuple[float, DeliveryFailed | None]:
    started = time.monotonic()
    try:
        post(url, b"{}", {}, allow_private=True, limits=limits)
    except DeliveryFailed as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_a_receiver_dripping_its_headers_is_cut_at_the_deadline(dripper: Dripper) -> None:
    elapsed, failed = timed_post(dripper.url, LIMITS)
    assert failed is not None and failed.retryable and "no answer in time" in str(failed)
    assert LIMITS.deadline - 0.1 < elapsed < LIMITS.deadline + 0.6


def test_control_without_the_exchange_deadline_the_drip_holds_the_sender_as_long_as_it_likes(
    dripper: Dripper, no_exchange_deadline: None
) -> None:
    elapsed, failed = timed_post(dripper.url, LIMITS)
    assert failed is not None  # it hung up at last, headers unfinished
    assert elapsed > DRIP_SECONDS - 0.2  # never the 0.5 s read timeout: each byte came in time


# --- a worker's delivery, and the admin's test send -----------------------------------------------------


def hook(url: str) -> NotificationChannel:
    return NotificationChannel.objects.create(
        name=f"hook-{uuid.uuid4().hex[:6]}",
        kind=NotificationChannel.Kind.WEBHOOK,
        url=url,
        events=[NotificationChannel.Event.NODE_SERVING],
        allow_private=True,
    )


def pending_delivery(channel: NotificationChannel, **fields: Any) -> NotificationDelivery:
    note = Notification.objects.create(
        key=f"k-{uuid.uuid4().hex}", event="node-serving", title="t", payload={}
    )
    return NotificationDelivery.objects.create(notification=note, channel=channel, **fields)


@pytest.mark.django_db
def test_a_workers_delivery_to_a_dripping_receiver_ends_at_the_deadline_and_stays_retryable(
    dripper: Dripper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifications, "DELIVERY_LIMITS", LIMITS)
    delivery = pending_delivery(hook(dripper.url))
    started = time.monotonic()
    with pytest.raises(DeliveryFailed):
        notifications.deliver(delivery.pk)
    assert time.monotonic() - started < LIMITS.deadline + 0.6
    delivery.refresh_from_db()
    assert (delivery.status, delivery.claimed_until, delivery.attempts) == ("pending", None, 1)


@pytest.mark.django_db
def test_the_admins_test_send_to_a_dripping_receiver_answers_within_its_deadline(
    admin_client: Client, dripper: Dripper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifications, "TEST_SEND_LIMITS", LIMITS)
    channel = hook(dripper.url)
    started = time.monotonic()
    answer = admin_client.post(
        "/admin/packages_app/notificationchannel/",
        {"action": "send_test_message", "_selected_action": [channel.pk]},
        follow=True,
    )
    assert time.monotonic() - started < LIMITS.deadline + 1.5
    assert b"not delivered: no answer in time" in answer.content


@pytest.mark.django_db
def test_control_without_the_exchange_deadline_the_admins_test_send_waits_out_the_drip(
    admin_client: Client, dripper: Dripper, monkeypatch: pytest.MonkeyPatch, no_exchange_deadline: None
) -> None:
    monkeypatch.setattr(notifications, "TEST_SEND_LIMITS", LIMITS)
    channel = hook(dripper.url)
    started = time.monotonic()
    admin_client.post(
        "/admin/packages_app/notificationchannel/",
        {"action": "send_test_message", "_selected_action": [channel.pk]},
    )
    assert time.monotonic() - started > DRIP_SECONDS - 0.2  # in production: until gunicorn kills it


def test_the_test_send_deadline_fits_inside_gunicorns_timeout() -> None:
    from packages_app import admin

    assert admin.TEST_SENDS_FOR + notifications.TEST_SEND_LIMITS.deadline < 60  # docker-compose: --timeout 60


# --- deliveries a stopped worker left pending -------------------------------------------------------------


@pytest.mark.django_db
def test_deliveries_a_killed_worker_left_pending_are_sent_again_or_failed_by_the_periodic_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    channel = hook("http://127.0.0.1:9/never")
    past = timezone.now() - notifications.STALE_AFTER - timedelta(minutes=1)
    killed = pending_delivery(channel, attempts=1, claimed_until=past)  # claimed, never finished
    spent = pending_delivery(channel, attempts=notifications.MAX_ATTEMPTS, claimed_until=past)
    lost = pending_delivery(channel)  # recorded, its task never ran
    Notification.objects.filter(pk=lost.notification_id).update(created_at=past)
    fresh = pending_delivery(channel, attempts=1, claimed_until=timezone.now() + timedelta(seconds=30))
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.deliver_notification, "delay_on_commit", enqueued.append)

    tasks.notify_operations()

    assert sorted(enqueued) == sorted([killed.pk, lost.pk])
    states = {d.pk: (d.status, d.claimed_until) for d in NotificationDelivery.objects.all()}
    assert states[killed.pk] == ("pending", None) and states[lost.pk] == ("pending", None)
    assert states[spent.pk] == ("failed", None)
    assert states[fresh.pk][0] == "pending" and states[fresh.pk][1] is not None  # being sent: left alone
    assert "stopped" in NotificationDelivery.objects.get(pk=spent.pk).error
    assert notifications.MAX_ATTEMPTS == tasks.NOTIFY_MAX_RETRIES + 1


@pytest.mark.django_db
def test_control_without_the_sweep_a_killed_workers_delivery_stays_pending_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(notifications, "stale_deliveries", lambda now=None: [])
    past = timezone.now() - timedelta(days=7)
    killed = pending_delivery(hook("http://127.0.0.1:9/never"), attempts=1, claimed_until=past)
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.deliver_notification, "delay_on_commit", enqueued.append)
    tasks.notify_operations()
    killed.refresh_from_db()
    assert enqueued == [] and killed.status == "pending"  # a week on, nothing will touch it


# --- mail: one deadline over the whole SMTP exchange ------------------------------------------------------


class SmtpServer(Loopback):
    """A loopback SMTP server: ``honest`` answers each command and keeps the messages; otherwise it sends
    ``220 `` and then its greeting one byte every 0.1 s (each well inside EMAIL_TIMEOUT), never ending the
    line, for DRIP_SECONDS."""

    def __init__(self, honest: bool) -> None:
        self.honest = honest
        self.messages: list[bytes] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if self.honest:
                self._answer(conn)
            else:
                self.drip(conn, b"220 ")

    def _answer(self, conn: socket.socket) -> None:
        with conn.makefile("rb") as lines:
            conn.sendall(b"220 loopback ESMTP\r\n")
            for line in lines:
                command = line[:4].upper()
                if command == b"DATA":
                    conn.sendall(b"354 go on\r\n")
                    self.messages.append(b"".join(iter(lines.readline, b".\r\n")))
                    conn.sendall(b"250 kept\r\n")
                elif command == b"QUIT":
                    conn.sendall(b"221 bye\r\n")
                    return
                else:
                    conn.sendall(b"250 ok\r\n")


@pytest.fixture
def smtp_settings(settings: Any) -> Any:
    settings.EMAIL_BACKEND = "packages_app.notifications.BoundedEmailBackend"  # meshdash.settings' own
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_TIMEOUT = LIMITS.read_timeout  # each byte comes in 0.1 s: never this per-read timeout
    return settings


def mail_channel() -> NotificationChannel:
    return NotificationChannel(name="mail", kind=NotificationChannel.Kind.EMAIL, emails="ops@example.com")


def timed_mail(smtp_settings: Any, server: SmtpServer) -> tuple[float, DeliveryFailed | None]:
    smtp_settings.EMAIL_PORT = server.port
    channel = mail_channel()
    started = time.monotonic()
    try:
        notifications.send(channel, notifications.test_notification(channel), "test", LIMITS)
    except DeliveryFailed as exc:
        return time.monotonic() - started, exc
    finally:
        server.close()
    return time.monotonic() - started, None


def test_the_settings_send_mail_through_the_bounded_backend() -> None:
    import meshdash.settings

    assert meshdash.settings.EMAIL_BACKEND == "packages_app.notifications.BoundedEmailBackend"


def test_a_mail_server_dripping_its_greeting_is_cut_at_the_deadline(smtp_settings: Any) -> None:
    elapsed, failed = timed_mail(smtp_settings, SmtpServer(honest=False))
    assert failed is not None and failed.retryable and "no answer in time" in str(failed)
    assert LIMITS.deadline - 0.1 < elapsed < LIMITS.deadline + 0.6


def test_control_djangos_own_smtp_backend_is_held_for_the_whole_drip(smtp_settings: Any) -> None:
    smtp_settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # EMAIL_TIMEOUT per read only
    elapsed, failed = timed_mail(smtp_settings, SmtpServer(honest=False))
    assert failed is not None  # it hung up at last, the greeting unfinished
    assert elapsed > DRIP_SECONDS - 0.2  # in production: up to the worker's 600 s soft limit


def test_an_honest_mail_server_gets_the_message_through_the_bounded_backend(smtp_settings: Any) -> None:
    server = SmtpServer(honest=True)
    assert timed_mail(smtp_settings, server)[1] is None
    (message,) = server.messages
    assert b"Subject: [meshdash] meshdash test message to mail" in message
    assert b"To: ops@example.com" in message


# --- a Hub call's deadline ends with the call -------------------------------------------------------------


class Quick(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server's name
        self._ok()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._ok()

    def _ok(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def quick_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quick)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


CALL_DEADLINE = 1.0  # room for the call on a loaded machine; the wait below is past it


def hub_call_then_post(base: str, bounded_call: Any) -> DeliveryFailed | None:
    """A Hub call with a 1 s deadline, done at once; then, after that deadline passed, a POST in the same
    thread (the wait is for the old deadline to pass, not a measure of speed)."""
    policy = net.Policy.for_endpoint(
        base, (), development=True, limits=net.Limits(call_deadline=CALL_DEADLINE)
    )
    with bounded_call(policy, "a quick Hub call"):
        assert get_session().get(f"{base}/api/models/a/b").status_code == 200
    time.sleep(CALL_DEADLINE + 0.1)
    try:
        post(f"{base}/hook", b"{}", {}, allow_private=True)
    except DeliveryFailed as exc:
        return exc
    return None


def test_a_past_hub_calls_deadline_does_not_cut_a_later_exchange_in_the_same_thread(
    quick_server: str,
) -> None:
    assert hub_call_then_post(quick_server, net.bounded_call) is None


def test_control_a_deadline_left_set_by_the_hub_call_cuts_the_later_exchange(
    quick_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the request hook set the call's deadline, and neither the call nor the client reset it."""
    guarded = net._guard_request

    def leaking_hook(request: Any) -> None:
        guarded(request)
        call = net._CALL.get()
        if call is not None:
            net._DEADLINE.set(call.deadline)

    @contextlib.contextmanager
    def call_without_its_own_deadline(policy: net.Policy, what: str) -> Iterator[net.Call]:
        token = net._CALL.set(net.Call(policy, what, time.monotonic() + policy.limits.call_deadline))
        try:
            yield net._CALL.get()  # type: ignore[misc]
        finally:
            net._CALL.reset(token)

    monkeypatch.setattr(net, "_guard_request", leaking_hook)
    monkeypatch.setattr(net._BoundedClient, "send", httpx2.Client.send)
    failed = contextvars.copy_context().run(hub_call_then_post, quick_server, call_without_its_own_deadline)
    assert failed is not None and "no answer in time" in str(failed)
