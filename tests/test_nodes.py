"""Node credentials: made once, stored hashed, checked, revoked and rotated (services, commands, admin)."""

from __future__ import annotations

import hashlib
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client

from packages_app.models import Node
from packages_app.nodes import identity as nodes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    cache.clear()


def run(command: str, *args: str) -> list[str]:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().splitlines()


def test_create_node_prints_a_working_token_as_its_last_line() -> None:
    token = run("create_node", "gpu-box-1")[-1]
    node = nodes.authenticate_node(token)
    assert node is not None and node.name == "gpu-box-1"


def test_the_token_is_stored_only_as_its_sha256_digest() -> None:
    token = run("create_node", "gpu-box-1")[-1]
    node = Node.objects.get()
    assert node.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in {node.token_hash, node.token_prefix, node.name}
    assert token.startswith(node.token_prefix)


def test_tokens_are_long_and_different_every_time() -> None:
    first, second = nodes.create_node("a").token, nodes.create_node("b").token
    assert first != second
    assert len(first) >= 40  # 32 random bytes, url-safe base64, plus the prefix


def test_create_node_refuses_a_name_already_taken() -> None:
    run("create_node", "gpu-box-1")
    with pytest.raises(CommandError, match="already exists"):
        run("create_node", "gpu-box-1")


def test_a_wrong_or_malformed_token_authenticates_nobody() -> None:
    token = nodes.create_node("a").token
    for attempt in [token[:-1] + ("x" if token[-1] != "x" else "y"), "", "mdn_", "x" * 500, "\ud800"]:
        assert nodes.authenticate_node(attempt) is None


def test_revoke_node_stops_the_token_at_once() -> None:
    token = run("create_node", "gpu-box-1")[-1]
    run("revoke_node", "gpu-box-1")
    assert nodes.authenticate_node(token) is None
    assert Node.objects.get().revoked_at is not None


def test_rotate_node_token_replaces_the_token_and_lifts_a_revocation() -> None:
    old = run("create_node", "gpu-box-1")[-1]
    run("revoke_node", "gpu-box-1")
    new = run("rotate_node_token", "gpu-box-1")[-1]
    assert nodes.authenticate_node(old) is None
    assert nodes.authenticate_node(new) is not None


def test_commands_name_an_unknown_node_clearly() -> None:
    with pytest.raises(CommandError, match="No node is named 'ghost'"):
        run("revoke_node", "ghost")
    with pytest.raises(CommandError, match="No node is named 'ghost'"):
        run("rotate_node_token", "ghost")


def test_the_rate_limit_counts_requests_per_node_and_says_how_long_to_wait(settings: Any) -> None:
    settings.MESHDASH_NODE_RATE_LIMIT = 3
    node = nodes.create_node("a").node
    waits = [nodes.count_node_request(node) for _ in range(4)]
    assert waits[:3] == [None, None, None]
    assert waits[3] is not None and 1 <= waits[3] <= 60


def test_a_node_may_have_its_own_rate_limit(settings: Any) -> None:
    settings.MESHDASH_NODE_RATE_LIMIT = 1
    node = nodes.create_node("a").node
    node.rate_limit_per_minute = 5
    assert [nodes.count_node_request(node) for _ in range(5)] == [None] * 5


def test_a_rate_limit_of_zero_turns_the_limiter_off(settings: Any) -> None:
    settings.MESHDASH_NODE_RATE_LIMIT = 0
    node = nodes.create_node("a").node
    assert all(nodes.count_node_request(node) is None for _ in range(50))


@pytest.fixture
def admin_client_logged_in(client: Client) -> Client:
    User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.login(username="admin", password="pw")
    return client


def test_the_admin_creates_a_node_and_shows_its_token_once(admin_client_logged_in: Client) -> None:
    response = admin_client_logged_in.post(
        "/admin/packages_app/node/add/", {"name": "from-admin", "rate_limit_per_minute": ""}, follow=True
    )
    shown = [str(m) for m in response.context["messages"] if "Token for from-admin" in str(m)]
    token = shown[0].rsplit(" ", 1)[-1]
    assert nodes.authenticate_node(token) == Node.objects.get(name="from-admin")


def test_the_admin_revoke_and_rotate_actions_work(admin_client_logged_in: Client) -> None:
    issued = nodes.create_node("a")
    url = "/admin/packages_app/node/"
    admin_client_logged_in.post(url, {"action": "revoke_tokens", "_selected_action": [issued.node.pk]})
    assert nodes.authenticate_node(issued.token) is None
    response = admin_client_logged_in.post(
        url, {"action": "rotate_tokens", "_selected_action": [issued.node.pk]}, follow=True
    )
    token = next(str(m) for m in response.context["messages"] if "Token for a" in str(m)).rsplit(" ", 1)[-1]
    assert nodes.authenticate_node(token) == issued.node
