"""POST /api/v1/hooks/hub: the Hub's repo-update webhooks, as the Hub and as an attacker send them."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from kombu.exceptions import OperationalError as KombuOperationalError

from packages_app import tasks
from packages_app.models import Package

URL = "/api/v1/hooks/hub"
SECRET = "s3cret-webhook-value-0123456789"
QWEN = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
HEAD = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"

pytestmark = pytest.mark.django_db


def hub_payload(
    name: str = QWEN, scope: str = "repo.content", action: str = "update", **repo: Any
) -> dict[str, Any]:
    """A payload shaped like the Hub's (webhook version 3), trimmed to what a repo push carries."""
    return {
        "event": {"action": action, "scope": scope},
        "repo": {
            "type": "model",
            "name": name,
            "id": "6620a1b2c3d4e5f601234567",
            "private": False,
            "url": {
                "web": f"https://huggingface.co/{name}",
                "api": f"https://huggingface.co/api/models/{name}",
            },
            "headSha": HEAD,
            "owner": {"id": "65f0a1b2c3d4e5f601234567"},
            **repo,
        },
        "webhook": {"id": "6620a1b2c3d4e5f6012345ff", "version": 3},
        "updatedRefs": [{"ref": "refs/heads/main", "oldSha": "0" * 40, "newSha": HEAD}],
    }


@pytest.fixture(autouse=True)
def webhook_secret(settings: Any) -> str:
    settings.MESHDASH_WEBHOOK_SECRET = SECRET
    settings.MESHDASH_NAMESPACES = ["meshllm"]
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"  # as in production; enqueues are mocked
    return SECRET


@pytest.fixture
def enqueued() -> Any:
    with mock.patch.object(tasks.sync_package_task, "delay_on_commit") as delay:
        yield delay


def post(
    client: Client, body: Any, secret: str | None = SECRET, raw: bytes | None = None, **extra: Any
) -> Any:
    headers = {} if secret is None else {"X-Webhook-Secret": secret}
    data = raw if raw is not None else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", headers=headers, **extra)


def test_it_queues_a_sync_for_a_push_to_a_followed_layer_package(client: Client, enqueued: Any) -> None:
    response = post(client, hub_payload())
    assert response.status_code == 202
    assert response.json() == {"queued": True, "repo": QWEN, "head_sha": HEAD}
    enqueued.assert_called_once_with(QWEN)


def test_the_queued_sync_runs_once_the_request_commits(
    client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    with (
        mock.patch.object(tasks.sync_package_task, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert post(client, hub_payload()).status_code == 202
    delay.assert_called_once_with(QWEN)


def test_without_a_broker_the_sync_goes_to_the_background_pool_not_the_request(
    client: Client, settings: Any, enqueued: Any
) -> None:
    from packages_app import background, queueing

    settings.CELERY_BROKER_URL = ""  # eager tasks: enqueuing would run the whole sync in this request
    with mock.patch.object(background, "submit") as submit:
        assert post(client, hub_payload()).status_code == 202
    submit.assert_called_once_with(queueing.enqueue_sync, QWEN)
    enqueued.assert_not_called()


def test_control_enqueuing_eagerly_would_run_the_sync_inside_the_request(
    client: Client, settings: Any, django_capture_on_commit_callbacks: Any, eager_tasks: None
) -> None:
    from packages_app import background

    settings.CELERY_BROKER_URL = ""
    with (
        mock.patch.object(background, "eager", return_value=False),  # the guard switched off
        mock.patch.object(tasks.sync_package_task, "run") as sync,
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert post(client, hub_payload()).status_code == 202
    sync.assert_called_once_with(QWEN)  # the task body ran in this thread, during the request


def test_a_full_background_pool_answers_503_with_retry_after(client: Client, settings: Any) -> None:
    from packages_app import background

    settings.CELERY_BROKER_URL = ""
    with mock.patch.object(background, "submit", side_effect=background.PoolFull("busy")):
        response = post(client, hub_payload())
    assert response.status_code == 503 and int(response["Retry-After"]) > 0


def test_it_is_disabled_with_a_404_when_no_secret_is_configured(
    client: Client, settings: Any, enqueued: Any
) -> None:
    settings.MESHDASH_WEBHOOK_SECRET = ""
    response = post(client, hub_payload(), secret="")
    assert response.status_code == 404 and "disabled" in response.json()["error"]
    enqueued.assert_not_called()


@pytest.mark.parametrize("secret", [None, "", "wrong", SECRET[:-1], SECRET + "x", SECRET.upper()])
def test_it_refuses_a_missing_or_wrong_secret(client: Client, enqueued: Any, secret: str | None) -> None:
    response = post(client, hub_payload(), secret=secret)
    assert response.status_code == 403
    assert "X-Webhook-Secret" in response.json()["error"]
    enqueued.assert_not_called()


def test_it_compares_the_secret_in_constant_time(client: Client, enqueued: Any) -> None:
    with mock.patch("packages_app.web.webhooks.hmac.compare_digest", return_value=False) as compare:
        assert post(client, hub_payload()).status_code == 403
    compare.assert_called_once_with(SECRET.encode(), SECRET.encode())


def test_it_refuses_anything_but_post(client: Client) -> None:
    response = client.get(URL, headers={"X-Webhook-Secret": SECRET})
    assert response.status_code == 405 and response["Allow"] == "POST"


@pytest.mark.parametrize(
    "name",
    [
        "https://evil.example/meshllm/x-layers",
        "../../etc/passwd",
        "meshllm/../x-layers",
        "meshllm/a--b-layers",
        "meshllm/a..b-layers",
        "/meshllm/x-layers",
        "meshllm/x-layers/extra",
        "meshllm\\x-layers",
        "meshllm/" + "a" * 90 + "-layers",
        "meshllm/.hidden-layers",
        "meshllm/x-layers.git",
        "meshllm/x layers",
        "meshllm/<script>-layers",
    ],
)
def test_it_refuses_repo_ids_that_are_urls_paths_or_tricks(client: Client, enqueued: Any, name: str) -> None:
    response = post(client, hub_payload(name=name))
    assert response.status_code == 400
    assert response.json()["error"].startswith("repo.name: ")
    enqueued.assert_not_called()
    assert not Package.objects.exists()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (hub_payload(name="someone-else/x-layers"), "outside the namespaces"),
        (hub_payload(type="dataset"), "dataset repos"),
        (hub_payload(type="space"), "space repos"),
        (hub_payload(scope="discussion", action="create"), "discussion/create"),
        (hub_payload(scope="repo.config", action="update"), "repo.config/update"),
        (hub_payload(scope="repo", action="delete"), "repo/delete"),
        (hub_payload(name="meshllm/catalog-notes"), "not a layer package"),
    ],
)
def test_it_acknowledges_but_ignores_events_that_are_not_for_a_followed_package(
    client: Client, enqueued: Any, payload: dict[str, Any], reason: str
) -> None:
    response = post(client, payload)
    assert response.status_code == 200
    assert response.json()["queued"] is False and reason in response.json()["reason"]
    enqueued.assert_not_called()


def test_a_tracked_package_without_the_layers_suffix_is_still_synced(client: Client, enqueued: Any) -> None:
    Package.objects.create(repo_id="meshllm/odd-name", tracked=True)
    assert post(client, hub_payload(name="meshllm/odd-name")).status_code == 202
    enqueued.assert_called_once_with("meshllm/odd-name")


@pytest.mark.parametrize("head", ["<img src=x onerror=alert(1)>", HEAD + "\n", HEAD.upper(), HEAD[:39], 40])
def test_a_head_sha_that_is_not_40_hex_is_dropped_not_trusted(
    client: Client, enqueued: Any, head: Any
) -> None:
    response = post(client, hub_payload(headSha=head))
    assert response.status_code == 202 and response.json()["head_sha"] is None


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "body must be a JSON object"),
        (b'{"event": "update"}', 400, "event must be a JSON object"),
        (b'{"event": {}, "repo": []}', 400, "repo must be a JSON object"),
        (
            b'{"event": {"scope": 1}, "repo": {"name": "meshllm/x-layers", "type": "model"}}',
            400,
            "event.scope",
        ),
        (b'{"event": {"scope": "repo", "action": "update"}, "repo": {"type": "model"}}', 400, "repo.name"),
        (b"[" * 100_000 + b"]" * 100_000, 413, "more than 6250 values"),
        (b"[" * 1_000 + b"]" * 1_000, 400, "more than 16 levels deep"),
        (b"\xff\xfe{}", 400, "not valid JSON"),
    ],
)
def test_it_answers_malformed_bodies_with_a_json_error(
    client: Client, enqueued: Any, raw: bytes, status: int, message: str
) -> None:
    response = post(client, None, raw=raw)
    assert response.status_code == status
    assert message in response.json()["error"]
    enqueued.assert_not_called()


def test_it_refuses_a_body_over_the_size_limit(client: Client, enqueued: Any) -> None:
    payload = hub_payload()
    payload["comment"] = {"content": "x" * 300_000}
    response = post(client, payload)
    assert response.status_code == 413 and "KiB" in response.json()["error"]


def test_it_refuses_a_body_that_is_not_declared_as_json(client: Client) -> None:
    response = client.post(
        URL, data=json.dumps(hub_payload()), content_type="text/plain", headers={"X-Webhook-Secret": SECRET}
    )
    assert response.status_code == 415


def test_it_answers_503_with_retry_after_when_the_task_queue_is_down(client: Client) -> None:
    down = KombuOperationalError("down")
    with mock.patch.object(tasks.sync_package_task, "delay_on_commit", side_effect=down):
        response = post(client, hub_payload())
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0 and "queue" in response.json()["error"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
event_like = st.fixed_dictionaries(
    {"event": st.fixed_dictionaries({"scope": json_values, "action": json_values}) | json_values},
    optional={"repo": st.fixed_dictionaries({"name": st.text(max_size=120) | json_values}) | json_values},
)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values | event_like)
def test_no_payload_ever_gets_a_500_or_a_non_json_answer(client: Client, enqueued: Any, body: Any) -> None:
    response = post(client, body)
    assert response.status_code in (200, 202, 400)
    assert response["Content-Type"] == "application/json"
    assert isinstance(response.json(), dict)
