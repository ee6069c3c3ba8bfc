"""Node endpoints beside reports: OTLP/HTTP traces (``POST /v1/traces``) and the agent's run registrations.

Both authenticate the node token (``Authorization: Bearer``) and count against the node's rate limit,
as reports do. /v1/traces follows the OTLP/HTTP spec: protobuf or JSON in, the same encoding out,
gzip accepted with the inflated size capped, partial success for spans it does not store.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from google.protobuf import json_format
from google.protobuf.message import Message

from packages_app import queueing, telemetry
from packages_app.models import Node
from packages_app.nodes import identity, otlp
from packages_app.nodes.report_schema import BodyError
from packages_app.nodes.run_schema import validate_run, validate_runs
from packages_app.web.api import authorized_node, count_refusal, error_response, node_json_endpoint

log = logging.getLogger(__name__)

MAX_RUNS_BYTES = 256 * 1024


@csrf_exempt
def traces_export(request: HttpRequest) -> HttpResponse:
    """OTLP/HTTP trace export: the decode spans become reports; everything else is counted."""
    try:
        response = _traces(request)
    except (OperationalError, InterfaceError, *queueing.BROKER_DOWN):
        raise  # the database or Redis is down: meshdash.middleware answers 503 + Retry-After (OTLP retries)
    except Exception:  # the last guard: never an HTML 500 page for an exporter
        log.exception("OTLP traces endpoint failed")
        response = error_response(500, "Internal error; the export was not fully processed.")
    count_refusal("otlp", response.status_code)
    return response


def _traces(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return error_response(405, "Only POST is allowed here.", Allow="POST")
    node = authorized_node(request)
    if not isinstance(node, Node):
        return node
    try:
        raw, budget = _read_body(request)
        export = otlp.parse_export(raw, request.content_type or "", budget)
    except otlp.OtlpTooLarge as exc:
        return error_response(413, str(exc))
    except otlp.OtlpError as exc:
        status = 415 if "Content-" in str(exc) else 400
        return error_response(status, str(exc))
    retry_after = identity.count_node_spans(node, otlp.span_count(export))
    if retry_after is not None:
        return error_response(429, "Too many spans from this node this minute.", Retry_After=str(retry_after))
    identity.touch_node(node)
    try:
        outcome = telemetry.store_spans(node, export, timezone.now())
    except telemetry.RunConflict as exc:
        return error_response(409, str(exc))
    queueing.request_node_check(node.pk)
    return _otlp_response(outcome.response, request.content_type or "")


def _read_body(request: HttpRequest) -> tuple[bytes, otlp.Budget]:
    """The body, inflated, and the budget the bytes sent buy (compressed bytes, when gzipped)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise otlp.OtlpError("Content-Encoding must be gzip or identity.")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > otlp.MAX_BODY_BYTES:
        raise otlp.OtlpTooLarge(f"The body must be at most {otlp.MAX_BODY_BYTES // (1024 * 1024)} MiB.")
    raw = request.read(otlp.MAX_BODY_BYTES + 1)
    if len(raw) > otlp.MAX_BODY_BYTES:
        raise otlp.OtlpTooLarge(f"The body must be at most {otlp.MAX_BODY_BYTES // (1024 * 1024)} MiB.")
    budget = otlp.Budget(len(raw))
    return (otlp.gunzip_capped(raw, budget.inflated_bytes) if encoding == "gzip" else raw), budget


def _otlp_response(message: Message, content_type: str) -> HttpResponse:
    if content_type == "application/json":
        return JsonResponse(json_format.MessageToDict(message), status=200)
    return HttpResponse(message.SerializeToString(), status=200, content_type="application/x-protobuf")


@node_json_endpoint(MAX_RUNS_BYTES, source="runs")
def runs_register(request: HttpRequest, node: Node, data: Any) -> HttpResponse:
    """The agent's view of its node's runs; one result per run, in order (like the report batch)."""
    try:
        bodies = validate_runs(data)
    except BodyError as exc:
        return error_response(400, exc.message, exc.field)
    results: list[dict[str, Any]] = []
    for index, body in enumerate(bodies):
        try:
            run = validate_run(body, f"runs.{index}")
        except BodyError as exc:
            results.append({"index": index, "status": 400, "error": exc.message, "field": exc.field})
            continue
        try:
            outcome = telemetry.run_register(node, run)
        except telemetry.RunConflict as exc:
            results.append(
                {"index": index, "status": 409, "error": str(exc), "field": f"runs.{index}.run_id"}
            )
            continue
        if outcome.unknown_revision is not None:
            queueing.request_ingests([outcome.unknown_revision])
        results.append(
            {
                "index": index,
                "status": 200,
                "run_id": outcome.run_id,
                "revision_linked": outcome.linked_publicly,
                "reports_linked": outcome.reports_linked,
            }
        )
    return JsonResponse({"results": results}, status=200)
