"""OTLP in: devnode's decode spans over gRPC and OTLP/HTTP become reports linked to the right revision."""

from __future__ import annotations

import gzip
import json
import random
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from django.core.cache import cache
from django.test import Client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode, OtlpTarget
from packages_app.models import Node, NodeRun, Package, Report, Revision
from packages_app.nodes import identity, otlp
from packages_app.web.otlp_grpc import build_server

REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
SHA = "b" * 40
OTHER_SHA = "c" * 40
PLAN = payloads.RunPlan(repo=REPO, ref="main", run_id="run-42", requested_strategy="auto")


@pytest.fixture
def token(db: None) -> str:
    return identity.create_node("node-a").token


@pytest.fixture
def revision(db: None) -> Revision:
    package = Package.objects.create(repo_id=REPO, private=False)
    Revision.objects.create(package=package, commit_sha=OTHER_SHA)
    return Revision.objects.create(package=package, commit_sha=SHA)


def register_run(client: Client, token: str, run_id: str = "run-42", sha: str = SHA) -> Any:
    body = {
        "runs": [
            {
                "run_id": run_id,
                "topology_id": "topo-0001",
                "package_ref": f"{REPO}@main",
                "package": {"repo": REPO, "revision": sha},
                "version": "0.64.0",
                "stages": [
                    {
                        "stage_id": "stage-0",
                        "stage_index": 0,
                        "node_id": "a",
                        "layer_start": 0,
                        "layer_end": 21,
                    },
                    {
                        "stage_id": "stage-1",
                        "stage_index": 1,
                        "node_id": "b",
                        "layer_start": 21,
                        "layer_end": 41,
                    },
                ],
                "devices": [{"backend_device": "CUDA0"}],
            }
        ]
    }
    return client.post(
        "/api/v1/runs",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def spans(n: int, plan: payloads.RunPlan = PLAN, seed: int = 1) -> list[Any]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        measured = payloads.decode(plan, rng, 128)
        attrs = payloads.span_attributes(plan, measured, "stage-0")
        out.append(payloads.decode_span(attrs, rng, measured.predicted_ms))
    return out


def post_traces(client: Client, token: str | None, body: bytes, **headers: str) -> Any:
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    content_type = headers.pop("content_type", "application/x-protobuf")
    extra.update({f"HTTP_{k.upper()}": v for k, v in headers.items()})
    return client.post("/v1/traces", body, content_type=content_type, **extra)


def answer(response: Any) -> ExportTraceServiceResponse:
    message = ExportTraceServiceResponse()
    message.ParseFromString(response.content)
    return message


# --- OTLP/HTTP ----------------------------------------------------------------------------------


def test_decode_spans_posted_as_protobuf_become_reports_of_the_registered_revision(
    client: Client, token: str, revision: Revision
) -> None:
    assert register_run(client, token).status_code == 200
    response = post_traces(client, token, payloads.export_request(spans(3)).SerializeToString())
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-protobuf"
    assert not answer(response).HasField("partial_success")
    rows = Report.objects.filter(source=Report.Source.OTLP)
    assert rows.count() == 3
    assert {r.revision_id for r in rows} == {revision.pk}
    row = rows.first()
    assert row is not None
    assert (row.requested_strategy, row.effective_strategy, row.run_id) == ("auto", "native-mtp", "run-42")
    assert row.stage_splits == "0..21|21..41" and row.mtp_used
    assert row.predicted_per_second is not None and row.predicted_per_second > 0


def test_a_re_exported_span_is_stored_once(client: Client, token: str, revision: Revision) -> None:
    body = payloads.export_request(spans(4)).SerializeToString()
    post_traces(client, token, body)
    post_traces(client, token, body)
    assert Report.objects.count() == 4


def test_spans_that_came_before_their_run_are_linked_when_the_agent_registers_it(
    client: Client, token: str, revision: Revision
) -> None:
    post_traces(client, token, payloads.export_request(spans(2)).SerializeToString())
    assert set(Report.objects.values_list("revision_id", flat=True)) == {None}
    result = register_run(client, token).json()["results"][0]
    assert result["reports_linked"] == 2 and result["revision_linked"] is True
    assert set(Report.objects.values_list("revision_id", flat=True)) == {revision.pk}
    assert NodeRun.objects.get().stage_splits == "0..21|21..41"


def test_unknown_spans_and_missing_attributes_are_counted_as_partial_success(
    client: Client, token: str, revision: Revision
) -> None:
    good, unknown, missing = spans(3)
    unknown.name = "stage.openai_decode_token"
    kept = [kv for kv in missing.attributes if kv.key != "skippy.run_id"]
    del missing.attributes[:]
    missing.attributes.extend(kept)
    response = post_traces(
        client, token, payloads.export_request([good, unknown, missing]).SerializeToString()
    )
    assert response.status_code == 200
    partial = answer(response).partial_success
    assert partial.rejected_spans == 2
    assert (
        "skippy.run_id" in partial.error_message and "other than stage.openai_decode" in partial.error_message
    )
    assert Report.objects.count() == 1


def test_otlp_json_with_hex_ids_is_accepted_and_answered_in_json(
    client: Client, token: str, revision: Revision
) -> None:
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "stage.openai_decode",
        "kind": 1,
        "startTimeUnixNano": "1764547200000000000",
        "endTimeUnixNano": "1764547201000000000",
        "attributes": [
            {"key": "skippy.run_id", "value": {"stringValue": "run-42"}},
            {"key": "llama_stage.spec.requested_strategy", "value": {"stringValue": "mtp"}},
            {"key": "llama_stage.spec.effective_strategy", "value": {"stringValue": "disabled"}},
            {"key": "llama_stage.elapsed_ms", "value": {"doubleValue": 1000.0}},
            {"key": "llama_stage.decode_token_count", "value": {"intValue": "40"}},
        ],
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    response = post_traces(client, token, body, content_type="application/json")
    assert response.status_code == 200 and response.json() == {}
    row = Report.objects.get()
    assert row.body["otlp"]["span_id"] == "eee19b7ec3c1b174"
    assert (row.requested_strategy, row.effective_strategy, row.predicted_per_second) == (
        "mtp",
        "disabled",
        40.0,
    )


def test_a_gzip_body_is_inflated(client: Client, token: str, revision: Revision) -> None:
    body = gzip.compress(payloads.export_request(spans(2)).SerializeToString())
    assert post_traces(client, token, body, content_encoding="gzip").status_code == 200
    assert Report.objects.count() == 2


def test_a_decompression_bomb_is_refused_not_inflated(client: Client, token: str) -> None:
    bomb = gzip.compress(b"\0" * (otlp.MAX_BODY_BYTES + 1024))
    assert len(bomb) < 64 * 1024
    response = post_traces(client, token, bomb, content_encoding="gzip")
    assert response.status_code == 413
    assert "inflates past" in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\xff\xff\xff garbage", "application/x-protobuf", 400),
        (b"{not json", "application/json", 400),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}', "application/json", 400),
        (b"", "text/plain", 415),
    ],
)
def test_a_body_that_is_not_an_otlp_export_gets_a_clear_4xx(
    client: Client, token: str, body: bytes, content_type: str, status: int
) -> None:
    response = post_traces(client, token, body, content_type=content_type)
    assert response.status_code == status
    assert response.json()["error"]


def test_traces_need_a_node_token(client: Client, db: None) -> None:
    body = payloads.export_request(spans(1)).SerializeToString()
    assert post_traces(client, None, body).status_code == 401
    assert post_traces(client, "mdn_wrong", body).status_code == 401
    assert not Report.objects.exists()


def test_traces_count_against_the_node_rate_limit(client: Client, token: str) -> None:
    cache.clear()  # the window counters of earlier tests' nodes (same primary keys) must not count
    Node.objects.filter(name="node-a").update(rate_limit_per_minute=1)
    body = payloads.export_request(spans(1)).SerializeToString()
    assert post_traces(client, token, body).status_code == 200
    limited = post_traces(client, token, body)
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1


# --- devnode end to end -------------------------------------------------------------------------


@pytest.fixture
def grpc_receiver(transactional_db: None) -> Iterator[int]:
    server, port = build_server("127.0.0.1", 0, close_connections=True)
    server.start()
    yield port
    server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed


def complete(node: DevNode, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        request = urllib.request.Request(
            node.url + "/v1/chat/completions",
            data=json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            out.append(json.loads(response.read()))
    return out


def test_devnode_spans_over_otlp_grpc_are_stored_linked_to_the_revision(
    grpc_receiver: int, transactional_db: None
) -> None:
    token = identity.create_node("node-grpc").token
    revision = Revision.objects.create(
        package=Package.objects.create(repo_id=REPO, private=False), commit_sha=SHA
    )
    register_run(Client(), token)
    target = OtlpTarget(url=f"grpc://127.0.0.1:{grpc_receiver}", token=token)
    with DevNode(PLAN, otlp=target, seed=3) as node:
        answers = complete(node, 5)
        assert node.exporter is not None and node.exporter.errors == 0
    assert all("timings" in a and a["timings"]["predicted_n"] > 0 for a in answers)
    rows = Report.objects.filter(source=Report.Source.OTLP, node__name="node-grpc")
    assert rows.count() == 5
    assert {r.revision_id for r in rows} == {revision.pk}


def test_the_grpc_receiver_refuses_an_unknown_token(grpc_receiver: int) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_receiver}")
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Export(
            payloads.export_request(spans(1)), metadata=(("authorization", "Bearer mdn_x"),), timeout=5
        )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()


def test_devnode_spans_over_otlp_http_with_gzip_are_stored_linked_to_the_revision(live_server: Any) -> None:
    token = identity.create_node("node-http").token
    revision = Revision.objects.create(
        package=Package.objects.create(repo_id=REPO, private=False), commit_sha=SHA
    )
    register_run(Client(), token)
    target = OtlpTarget(url=live_server.url, token=token, gzip=True)
    with DevNode(PLAN, otlp=target, seed=4) as node:
        complete(node, 4)
        assert node.exporter is not None and node.exporter.errors == 0
    rows = Report.objects.filter(source=Report.Source.OTLP, node__name="node-http")
    assert rows.count() == 4
    assert {r.revision_id for r in rows} == {revision.pk}


# --- requested vs effective, shown --------------------------------------------------------------


def test_the_package_page_and_api_show_requested_vs_effective_per_node_and_topology(
    client: Client, token: str, revision: Revision
) -> None:
    Package.objects.filter(repo_id=REPO).update(latest_revision=revision)
    register_run(client, token)
    unmet = payloads.RunPlan(
        repo=REPO, run_id="run-42", requested_strategy="mtp", effective_strategy="disabled"
    )
    post_traces(client, token, payloads.export_request(spans(3, unmet)).SerializeToString())
    post_traces(client, token, payloads.export_request(spans(2, PLAN, seed=9)).SerializeToString())
    page = client.get(f"/packages/{REPO}/").content.decode()
    assert "Requested vs effective strategy" in page and "not what was requested" in page
    plans = client.get(f"/api/v1/packages/{REPO}").json()["throughput"]["plans"]
    assert [
        (
            p["node"],
            p["stage_splits"],
            p["requested_strategy"],
            p["effective_strategy"],
            p["reports"],
            p["from_spans"],
            p["differs"],
        )
        for p in plans
    ] == [
        ("node-a", "0..21|21..41", "mtp", "disabled", 3, 3, True),
        ("node-a", "0..21|21..41", "auto", "native-mtp", 2, 2, False),
    ]


def test_the_grpc_receiver_takes_gzip_compressed_exports(grpc_receiver: int) -> None:
    token = identity.create_node("node-gz").token
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_receiver}")
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)
    answer = stub.Export(
        payloads.export_request(spans(3)),
        metadata=(("authorization", f"Bearer {token}"),),
        compression=grpc.Compression.Gzip,
        timeout=5,
    )
    channel.close()
    assert not answer.HasField("partial_success")
    assert Report.objects.filter(node__name="node-gz").count() == 3


def test_the_openapi_document_describes_the_otlp_and_run_endpoints(client: Client) -> None:
    document = client.get("/api/v1/openapi.json").json()
    assert {"/v1/traces", "/api/v1/runs"} <= set(document["paths"])
    assert "run_id" in document["components"]["schemas"]["RunIn"]["properties"]


def test_a_run_on_a_revision_not_ingested_yet_asks_for_its_ingest(
    client: Client, token: str, settings: Any
) -> None:
    from unittest import mock

    from packages_app import tasks

    cache.clear()
    settings.CELERY_TASK_ALWAYS_EAGER = False  # as with a broker; eager mode enqueues nothing
    with mock.patch.object(tasks.ingest_revision_task, "delay_on_commit") as delay_on_commit:
        result = register_run(client, token).json()["results"][0]
    assert result["revision_linked"] is False
    delay_on_commit.assert_called_once_with(REPO, SHA)
