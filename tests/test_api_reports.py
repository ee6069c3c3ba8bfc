"""The node report endpoints: POST /api/v1/reports and /api/v1/reports/batch, as a node sees them."""

from __future__ import annotations

import copy
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from packages_app import reports
from packages_app.management.commands import simulate_nodes
from packages_app.models import Package, Report, Revision
from packages_app.nodes import identity as nodes

QWEN = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
FIRST_SHA = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"
MANIFEST = "bac69a30665539535a4018006397ed257d383f96909d991d7a26c6eb3c54d54c"
URL = "/api/v1/reports"
BATCH_URL = "/api/v1/reports/batch"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    cache.clear()  # the rate limiter and ingest de-duplication live there


@pytest.fixture(autouse=True)
def fake_tasks(settings: Any) -> Any:
    # Reports for unknown revisions under a tracked namespace enqueue an ingest: record, don't run.
    from packages_app import tasks

    settings.CELERY_TASK_ALWAYS_EAGER = False  # as with a broker; eager mode enqueues nothing
    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit") as delay_on_commit:
        yield mock.Mock(ingest_revision_task=mock.Mock(delay_on_commit=delay_on_commit))


@pytest.fixture
def token() -> str:
    return nodes.create_node("node-a").token


def make_report(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN, "revision": FIRST_SHA, "manifest_sha256": MANIFEST},
        "topology": {
            "topology_id": "topo-1",
            "stages": [
                {"node": "node-a", "layer_start": 0, "layer_end": 27, "device": "CUDA0"},
                {"node": "node-b", "layer_start": 27, "layer_end": 41, "device": "Metal"},
            ],
        },
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "disabled",
            "mtp_source": "Disabled",
        },
        "hardware": {"gpu": "RTX 4090", "vram_gb": 24},
        "timings": {
            "prompt_n": 120,
            "prompt_ms": 310.5,
            "prompt_per_second": 386.5,
            "predicted_n": 256,
            "predicted_ms": 80757.0,
            "predicted_per_second": 3.17,
            "draft_n": 0,
            "draft_n_accepted": 0,
            "speculative_proposed_n": 0,
            "speculative_accepted_n": 0,
        },
    }
    body.update(changes)
    return body


def post(client: Client, body: Any, token: str | None, url: str = URL, **extra: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(
        url, data=data, content_type=extra.pop("content_type", "application/json"), **headers, **extra
    )


def test_it_stores_a_report_and_answers_201(client: Client, token: str) -> None:
    response = post(client, make_report(), token)
    assert response.status_code == 201
    assert response.json() == {"id": Report.objects.get().pk, "duplicate": False}


def test_it_extracts_the_columns_the_dashboard_charts(client: Client, token: str) -> None:
    post(client, make_report(), token)
    row = Report.objects.get()
    assert (row.stage_splits, row.effective_strategy, row.mtp_source) == (
        "0..27|27..41",
        "disabled",
        "Disabled",
    )
    assert row.predicted_per_second == 3.17
    assert row.mtp_used is False


def test_a_verbatim_replay_answers_200_duplicate_and_stores_nothing(client: Client, token: str) -> None:
    body = make_report()
    first = post(client, body, token)
    # Same JSON with another key order and spacing is the same canonical body.
    replay = post(client, json.dumps(body, indent=2, sort_keys=True).encode(), token)
    assert replay.status_code == 200
    assert replay.json() == {"id": first.json()["id"], "duplicate": True}
    assert Report.objects.count() == 1


def test_the_same_report_id_with_another_body_answers_409(client: Client, token: str) -> None:
    body = make_report()
    post(client, body, token)
    changed = copy.deepcopy(body)
    changed["timings"]["predicted_per_second"] = 99.0
    response = post(client, changed, token)
    assert response.status_code == 409
    assert response.json()["field"] == "report_id"
    assert Report.objects.get().predicted_per_second == 3.17


def test_two_nodes_may_use_the_same_report_id(client: Client, token: str) -> None:
    other = nodes.create_node("node-b").token
    body = make_report()
    assert post(client, body, token).status_code == 201
    assert post(client, body, other).status_code == 201


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["timings"].update(prompt_n="12"), "timings.prompt_n"),
        (lambda b: b["timings"].update(predicted_n=1.5), "timings.predicted_n"),
        (lambda b: b["timings"].update(new_counter={"nested": 1}), "timings.new_counter"),
        (lambda b: b["package"].update(revision="ABC"), "package.revision"),
        (lambda b: b["package"].update(repo="meshllm/../etc"), "package.repo"),
        (lambda b: b["package"].pop("repo"), "package.repo"),
        (lambda b: b.update(report_id="not-a-uuid"), "report_id"),
        (lambda b: b.update(observed_at="yesterday"), "observed_at"),
        (lambda b: b.update(observed_at=1700000000), "observed_at"),
        (lambda b: b.update(observed_at="2024-05-01T10:00:00"), "observed_at"),
        (lambda b: b["topology"]["stages"][0].update(layer_start=30), "topology.stages.0"),
        (lambda b: b["topology"]["stages"][0].update(layer_end=0), "topology.stages.0.layer_end"),
        (lambda b: b["speculative"].update(mtp_source="Maybe"), "speculative.mtp_source"),
        (lambda b: b.update(hardware={"blob": "x" * 5000}), "hardware"),
        (lambda b: b.update(timings=[1, 2]), "timings"),
        (lambda b: b.update(stray="value"), "stray"),
        (lambda b: b["package"].update(branch="main"), "package.branch"),
        (lambda b: b["topology"].update(topology_id="bad\x00id"), "topology.topology_id"),
    ],
)
def test_it_rejects_a_bad_report_with_400_naming_the_field(
    client: Client, token: str, mutate: Any, field: str
) -> None:
    body = make_report()
    mutate(body)
    response = post(client, body, token)
    assert response.status_code == 400
    answer = response.json()
    assert answer["field"] == field
    assert answer["error"].endswith(".")
    assert not Report.objects.exists()


def test_it_refuses_unknown_top_level_keys_by_name(client: Client, token: str) -> None:
    response = post(client, make_report(extra_field=1), token)
    assert response.json() == {"error": "Unknown key 'extra_field' is not allowed.", "field": "extra_field"}


def test_it_keeps_unknown_timing_counters_as_they_come(client: Client, token: str) -> None:
    body = make_report()
    body["timings"]["native_mtp_hybrid_new_counter"] = 7
    body["timings"]["native_mtp_survival_accepted"] = [9, 8, 7, 6, 5, 4, 3, 2]
    assert post(client, body, token).status_code == 201
    stored = Report.objects.get().body["timings"]
    assert stored["native_mtp_hybrid_new_counter"] == 7
    assert stored["native_mtp_survival_accepted"] == [9, 8, 7, 6, 5, 4, 3, 2]


def test_it_caps_the_size_of_the_timings_object(client: Client, token: str) -> None:
    body = make_report()
    body["timings"].update({f"counter_{i:04d}": i for i in range(600)})
    response = post(client, body, token)
    assert response.status_code == 400
    assert response.json()["field"] == "timings"


@pytest.mark.parametrize(
    "raw", [b"{not json", b"  ", b"[" * 900 + b"]" * 900, b'{"a": NaN}', b'{"a": 1e999}', b"\xff\xfe"]
)
def test_it_answers_400_for_a_body_that_is_not_json(client: Client, token: str, raw: bytes) -> None:
    response = post(client, raw, token)
    assert response.status_code == 400
    assert "error" in response.json()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'"topology": {"topology_id": "\\ud800"}', "topology.topology_id"),
        (b'"hardware": {"gpu": "\\u0000"}', "hardware.gpu"),
        (b'"hardware": {"\\udfff": 1}', "hardware.\udfff".encode("utf-8", "replace").decode()),
        (b'"hardware": {"x": 1e999}', "hardware.x"),
    ],
)
def test_it_refuses_text_and_numbers_storage_cannot_hold(
    client: Client, token: str, raw: bytes, field: str
) -> None:
    body = json.dumps({k: v for k, v in make_report().items() if k not in ("topology", "hardware")})
    response = post(client, body[:-1].encode() + b", " + raw + b"}", token)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not Report.objects.exists()


def test_it_refuses_a_deeply_nested_hardware_object(client: Client, token: str) -> None:
    deep: dict[str, object] = {}
    for _ in range(30):
        deep = {"x": deep}
    response = post(client, make_report(hardware=deep), token)
    assert (response.status_code, response.json()["field"]) == (400, "hardware")


def test_it_answers_415_when_the_content_type_is_not_json(client: Client, token: str) -> None:
    response = post(client, json.dumps(make_report()).encode(), token, content_type="text/plain")
    assert response.status_code == 415
    assert response["Content-Type"] == "application/json"


def test_it_answers_413_for_a_body_over_64_kib(client: Client, token: str) -> None:
    response = post(client, b" " * (64 * 1024 + 1), token)
    assert response.status_code == 413
    assert "64 KiB" in response.json()["error"]


def test_it_answers_413_from_content_length_alone(client: Client, token: str) -> None:
    response = post(client, json.dumps(make_report()).encode(), token, CONTENT_LENGTH=str(10**9))
    assert response.status_code == 413


def test_a_batch_may_exceed_djangos_upload_limit_up_to_4_mib(
    client: Client, token: str, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024  # our limit, not Django's, must decide
    batch = {"reports": [make_report() for _ in range(20)]}
    response = post(client, batch, token, url=BATCH_URL)
    assert response.status_code == 200
    assert post(client, b" " * (4 * 1024 * 1024 + 1), token, url=BATCH_URL).status_code == 413


@pytest.mark.parametrize("authorization", [None, "Bearer mdn_wrong", "Basic dXNlcjpwYXNz", "Bearer "])
def test_it_answers_401_without_a_valid_token(client: Client, authorization: str | None) -> None:
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.post(URL, data=json.dumps(make_report()), content_type="application/json", **extra)
    assert response.status_code == 401
    assert response.json()["error"]
    assert not Report.objects.exists()


def test_it_answers_401_for_a_revoked_token(client: Client, token: str) -> None:
    nodes.revoke_node(nodes.get_node("node-a"))
    assert post(client, make_report(), token).status_code == 401


def test_a_rotated_token_replaces_the_old_one(client: Client, token: str) -> None:
    fresh = nodes.rotate_node_token(nodes.get_node("node-a")).token
    assert post(client, make_report(), token).status_code == 401
    assert post(client, make_report(), fresh).status_code == 201


def test_it_answers_429_with_retry_after_over_the_rate_limit(
    client: Client, token: str, settings: Any
) -> None:
    settings.MESHDASH_NODE_RATE_LIMIT = 2
    statuses = [post(client, make_report(), token).status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    limited = post(client, make_report(), token)
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert limited.json()["error"]


def test_the_rate_limit_is_per_node(client: Client, token: str, settings: Any) -> None:
    settings.MESHDASH_NODE_RATE_LIMIT = 1
    other = nodes.create_node("node-b").token
    assert post(client, make_report(), token).status_code == 201
    assert post(client, make_report(), other).status_code == 201


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_it_answers_405_in_json_for_other_methods(client: Client, token: str, method: str) -> None:
    response = getattr(client, method)(URL, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 405
    assert response.json()["error"]


def test_it_needs_no_csrf_token(token: str) -> None:
    strict = Client(enforce_csrf_checks=True)
    assert post(strict, make_report(), token).status_code == 201


def test_a_clock_far_off_is_recorded_and_flagged(client: Client, token: str) -> None:
    ahead = (datetime.now(UTC) + timedelta(minutes=30)).isoformat()
    post(client, make_report(observed_at=ahead), token)
    row = Report.objects.get()
    assert row.clock_skew_flagged is True
    assert row.clock_skew_seconds == pytest.approx(1800, abs=30)
    assert row.received_at < row.observed_at  # charts use received_at, the server's clock


def test_a_small_clock_difference_is_not_flagged(client: Client, token: str) -> None:
    behind = (datetime.now(UTC) - timedelta(minutes=2)).isoformat()
    post(client, make_report(observed_at=behind), token)
    assert Report.objects.get().clock_skew_flagged is False


def test_a_report_for_an_ingested_revision_is_linked_at_once(client: Client, token: str) -> None:
    package = Package.objects.create(repo_id=QWEN, private=False)
    revision = Revision.objects.create(package=package, commit_sha=FIRST_SHA)
    post(client, make_report(), token)
    assert Report.objects.get().revision == revision


def test_a_report_for_an_unknown_revision_is_kept_and_linked_when_it_is_ingested(
    client: Client, token: str
) -> None:
    post(client, make_report(), token)
    assert Report.objects.get().revision is None
    package = Package.objects.create(repo_id=QWEN, private=False)
    revision = Revision.objects.create(package=package, commit_sha=FIRST_SHA)
    assert reports.link_reports_to_revision(revision) == 1
    assert Report.objects.get().revision == revision


def test_a_report_links_by_manifest_digest_when_the_commit_is_unknown(client: Client, token: str) -> None:
    package = Package.objects.create(repo_id=QWEN, private=False)
    revision = Revision.objects.create(package=package, commit_sha="a" * 40, manifest_sha256=MANIFEST)
    post(client, make_report(), token)
    assert Report.objects.get().revision == revision


def test_an_unknown_revision_in_a_tracked_namespace_enqueues_its_ingest_once(
    client: Client, token: str, fake_tasks: Any
) -> None:
    for _ in range(3):
        post(client, make_report(), token)
    fake_tasks.ingest_revision_task.delay_on_commit.assert_called_once_with(QWEN, FIRST_SHA)


def test_an_unknown_revision_outside_tracked_namespaces_is_not_ingested(
    client: Client, token: str, fake_tasks: Any
) -> None:
    post(client, make_report(package={"repo": "someone/Model-layers", "revision": FIRST_SHA}), token)
    assert Report.objects.get().repo_id == "someone/Model-layers"
    fake_tasks.ingest_revision_task.delay_on_commit.assert_not_called()


def test_without_a_broker_no_ingest_runs_inside_the_report_request(
    client: Client, token: str, fake_tasks: Any, settings: Any
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert post(client, make_report(), token).status_code == 201
    fake_tasks.ingest_revision_task.delay_on_commit.assert_not_called()


def test_a_broker_failure_does_not_fail_the_report(client: Client, token: str, fake_tasks: Any) -> None:
    fake_tasks.ingest_revision_task.delay_on_commit.side_effect = ConnectionError("broker down")
    assert post(client, make_report(), token).status_code == 201
    assert post(client, make_report(), token).status_code == 201
    assert fake_tasks.ingest_revision_task.delay_on_commit.call_count == 2  # asked again, not forgotten


def test_a_known_revision_enqueues_nothing(client: Client, token: str, fake_tasks: Any) -> None:
    Revision.objects.create(package=Package.objects.create(repo_id=QWEN, private=False), commit_sha=FIRST_SHA)
    post(client, make_report(), token)
    fake_tasks.ingest_revision_task.delay_on_commit.assert_not_called()


def test_a_batch_answers_one_result_per_item_in_order(client: Client, token: str) -> None:
    stored = make_report()
    post(client, stored, token)
    conflicting = copy.deepcopy(stored)
    conflicting["timings"]["prompt_n"] = 1
    bad = make_report()
    bad["timings"]["prompt_ms"] = "5 ms"
    fresh = make_report()
    response = post(client, {"reports": [fresh, stored, conflicting, bad, fresh]}, token, url=BATCH_URL)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["status"] for r in results] == [201, 200, 409, 400, 200]
    assert results[0]["duplicate"] is False and results[1]["duplicate"] is True
    assert results[3]["field"] == "reports.3.timings.prompt_ms"
    assert results[4]["id"] == results[0]["id"]
    assert Report.objects.count() == 2


def test_a_batch_links_reports_to_their_revisions(client: Client, token: str) -> None:
    revision = Revision.objects.create(
        package=Package.objects.create(repo_id=QWEN, private=False), commit_sha=FIRST_SHA
    )
    other = make_report(package={"repo": "meshllm/Other-layers", "revision": "b" * 40})
    post(client, {"reports": [make_report(), other]}, token, url=BATCH_URL)
    assert Report.objects.filter(revision=revision).count() == 1
    assert Report.objects.filter(revision__isnull=True).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"reports": []}, "reports"),
        ({}, "reports"),
        ({"reports": {}}, "reports"),
        ([1], ""),
        ({"reports": [1] * 501}, "reports"),
    ],
)
def test_a_malformed_batch_answers_400(client: Client, token: str, body: Any, field: str) -> None:
    response = post(client, body, token, url=BATCH_URL)
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_a_batch_item_that_is_not_an_object_is_refused_alone(client: Client, token: str) -> None:
    response = post(client, {"reports": [make_report(), "nope"]}, token, url=BATCH_URL)
    assert [r["status"] for r in response.json()["results"]] == [201, 400]


def test_a_racing_replay_that_loses_the_insert_answers_duplicate(token: str) -> None:
    # Simulates the race: the row is already there when this insert runs, so the unique
    # constraint, not a prior read, decides the answer.
    from packages_app.nodes.report_schema import validate_report_body

    node = nodes.get_node("node-a")
    body = make_report()
    report, digest = validate_report_body(body)
    item = reports.ValidReport(report=report, digest=digest, body=body)
    now = datetime.now(UTC)
    first = reports.store_report(node, item, now)
    second = reports.store_report(node, item, now)
    assert (first.result, second.result, second.id) == (
        reports.Stored.CREATED,
        reports.Stored.DUPLICATE,
        first.id,
    )
    assert Report.objects.count() == 1


def test_the_health_ping_answers_ok(client: Client) -> None:
    assert client.get("/api/v1/ping").json() == {"ok": True}


def test_the_openapi_document_describes_the_report_endpoints(client: Client) -> None:
    document = client.get("/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    post_op = document["paths"]["/api/v1/reports"]["post"]
    assert post_op["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ReportIn"
    }
    assert {"201", "200", "400", "401", "409", "413", "415", "429"} <= set(post_op["responses"])
    schemas = document["components"]["schemas"]
    assert "timings" in schemas["ReportIn"]["properties"]
    assert schemas["ReportIn"]["additionalProperties"] is False
    assert "/api/v1/reports/batch" in document["paths"]


@pytest.mark.django_db(transaction=True)
def test_simulate_nodes_posts_reports_over_http_that_the_server_accepts(
    live_server: Any, settings: Any
) -> None:
    settings.MESHDASH_NAMESPACES = []  # the motivating revision is not ingested here; do not fetch it
    out = StringIO()
    call_command("simulate_nodes", "--url", live_server.url, "--count", "30", "--seed", "1", stdout=out)
    assert "Posted 30 reports" in out.getvalue()
    assert Report.objects.count() == 30
    first = Report.objects.filter(commit_sha=FIRST_SHA)
    assert first.count() == 30 and not first.filter(mtp_used=True).exists()
    assert {r.mtp_source for r in first} == {"Disabled"}


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first ``failures`` POSTs, then accepts the batch."""

    failures = 1
    seen = 0

    def do_POST(self) -> None:
        type(self).seen += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        ok = type(self).seen > type(self).failures
        body = b'{"results": [{"status": 201}]}' if ok else b'{"error": "The database is unavailable"}'
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("retries", "stored"), [(simulate_nodes.RETRIES_ON_503, True), (0, False)])
def test_simulate_nodes_retries_a_503_as_an_agent_does(monkeypatch: Any, retries: int, stored: bool) -> None:
    # The control (no retry) shows the 503 once ended the run: a busy SQLite test server answered it.
    monkeypatch.setattr(simulate_nodes, "RETRIES_ON_503", retries)
    monkeypatch.setattr(simulate_nodes, "RETRY_PAUSE", 0.01)
    _Flaky.seen = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        if stored:
            assert simulate_nodes.post_batch(url, "t", [{}]) == [201]
        else:
            with pytest.raises(CommandError, match="answered 503"):
                simulate_nodes.post_batch(url, "t", [{}])
    finally:
        server.shutdown()
        server.server_close()
