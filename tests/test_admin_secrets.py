"""Notification channels' secrets in the admin (issue 48): staff who may only view read neither the signing
secret nor a receiver URL's credentials (its user and password, and a Slack/Discord URL's token path), in the
list or on the channel's page; an operator's form never sends the secret back to the browser, and a blank
secret keeps the one set. Each with its control (the admin as it was)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client

from packages_app import admin as channel_admin
from packages_app.models import NotificationChannel

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-signing-value"
URL = "https://robot:pa55w0rd@hooks.example.com/services/T000/B000/XXTOKENXX"
LIST = "/admin/packages_app/notificationchannel/"


@pytest.fixture
def channel() -> NotificationChannel:
    return NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url=URL, secret=SECRET, events=["node-serving"]
    )


@pytest.fixture
def viewer_client() -> Client:
    """Staff with the view permission on channels and nothing more."""
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_notificationchannel"))
    client = Client()
    client.force_login(user)
    return client


def leaked(content: bytes) -> list[str]:
    text = content.decode()
    return [part for part in (SECRET, "pa55w0rd", "XXTOKENXX") if part in text]


def test_staff_who_may_only_view_see_no_secret_and_no_url_credentials(
    viewer_client: Client, channel: NotificationChannel
) -> None:
    listing = viewer_client.get(LIST)
    page = viewer_client.get(f"{LIST}{channel.pk}/change/")
    assert listing.status_code == page.status_code == 200
    assert leaked(listing.content) == [] and leaked(page.content) == []
    assert "https://hooks.example.com/…" in listing.content.decode()
    assert "not set" not in page.content.decode() and ">set<" in page.content.decode().replace(" ", "")


def test_control_the_admin_as_it_was_shows_both_to_a_viewer(
    viewer_client: Client, channel: NotificationChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = admin.ModelAdmin
    monkeypatch.setattr(channel_admin.NotificationChannelAdmin, "get_fields", base.get_fields)
    monkeypatch.setattr(
        channel_admin.NotificationChannelAdmin, "get_readonly_fields", base.get_readonly_fields
    )
    monkeypatch.setattr(
        channel_admin.NotificationChannelAdmin,
        "list_display",
        ("name", "kind", "enabled", "events", "url", "emails"),
    )
    assert "pa55w0rd" in leaked(viewer_client.get(LIST).content)
    assert SECRET in leaked(viewer_client.get(f"{LIST}{channel.pk}/change/").content)


def test_an_operators_form_never_sends_the_secret_back_and_a_blank_one_keeps_it(
    admin_client: Client, channel: NotificationChannel
) -> None:
    page = admin_client.get(f"{LIST}{channel.pk}/change/")
    assert SECRET not in page.content.decode()
    form: dict[str, Any] = {
        "name": "ops",
        "enabled": "on",
        "kind": "webhook",
        "events": ["node-serving"],
        "url": URL,
        "secret": "",
        "emails": "",
    }
    assert admin_client.post(f"{LIST}{channel.pk}/change/", form).status_code == 302
    channel.refresh_from_db()
    assert channel.secret == SECRET  # blank kept it
    admin_client.post(f"{LIST}{channel.pk}/change/", form | {"clear_secret": "on"})
    channel.refresh_from_db()
    assert channel.secret == ""


def test_control_the_old_widget_sent_the_secret_to_the_browser(
    admin_client: Client, channel: NotificationChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django import forms

    old_widgets = {"secret": forms.PasswordInput(render_value=True)}  # the admin builds its form per request
    monkeypatch.setattr(channel_admin.NotificationChannelForm.Meta, "widgets", old_widgets)
    assert SECRET in admin_client.get(f"{LIST}{channel.pk}/change/").content.decode()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, "https://hooks.example.com/…"),
        ("https://discord.com/api/webhooks/1/abc/slack", "https://discord.com/…"),
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
        ("http://[::1]:9000/hook?token=x", "http://[::1]:9000/…"),
        ("", ""),
    ],
)
def test_a_shown_url_keeps_only_the_scheme_host_and_port(url: str, shown: str) -> None:
    assert channel_admin.shown_url(url) == shown
