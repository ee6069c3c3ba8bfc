"""The JSON API: node report endpoints (authenticated POSTs; `models certify` reports too), a health ping and
the OpenAPI document.

Views stay thin: small decorators do auth, rate limiting and body parsing; report_schema.py
validates; reports.py stores. Every answer, errors included, is JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from packages_app import baselines, certify_reports, input_budget, metrics, queueing, reports
from packages_app.audit.certify_report import MAX_REPORT_BYTES as CERTIFY_MAX_BYTES
from packages_app.audit.certify_report import CertifyReportError
from packages_app.catalog.lookups import judge_manifest
from packages_app.input_budget import InputBudget, OverBudget
from packages_app.models import CertifyReport, Node
from packages_app.nodes import identity as nodes
from packages_app.nodes.report_schema import (
    MAX_DEPTH,
    BodyError,
    validate_baseline,
    validate_baselines,
    validate_batch,
    validate_report_body,
)
from packages_app.reports import Stored
from packages_app.web import access, check_budget, ratelimit
from packages_app.web.openapi import openapi_document

log = logging.getLogger(__name__)

MAX_SINGLE_BYTES = 64 * 1024
MAX_BATCH_BYTES = 4 * 1024 * 1024
# The input budget's depth: past report_schema's MAX_DEPTH, so that a report nested past it is refused
# naming its field; this cap only keeps json.loads and the validators off a hostile depth.
JSON_DEPTH = 4 * MAX_DEPTH
HTTP_STATUS = {Stored.CREATED: 201, Stored.DUPLICATE: 200, Stored.CONFLICT: 409}

_Item = TypeVar("_Item")
NodeView = Callable[[HttpRequest, Node, Any], HttpResponse]
View = Callable[[HttpRequest], HttpResponse]


class BodyTooLarge(Exception):
    pass


class NotJson(Exception):
    pass


def error_response(status: int, message: str, field: str | None = None, **headers: str) -> JsonResponse:
    body: dict[str, str] = {"error": message}
    if field is not None:
        body["field"] = field
    response = JsonResponse(body, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def node_json_endpoint(max_bytes: int, source: str = "report") -> Callable[[NodeView], View]:
    """POST-only, CSRF-exempt, bearer-token, rate-limited, JSON-body endpoint for serving nodes."""

    def decorate(view: NodeView) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest) -> HttpResponse:
            try:
                response = _guarded(request, view, max_bytes)
            except (OperationalError, InterfaceError, *queueing.BROKER_DOWN):
                raise  # the database or Redis is down: meshdash.middleware answers 503 + Retry-After
            except Exception:  # the last guard: never an HTML 500 page for a node
                log.exception("report endpoint failed")
                response = error_response(500, "Internal error; the request was not fully processed.")
            count_refusal(source, response.status_code)
            return response

        return wrapper

    return decorate


REFUSAL_REASON = {
    400: "invalid",
    401: "unauthorized",
    405: "method",
    409: "conflict",
    413: "too-large",
    415: "not-json",
    429: "rate-limited",
}


def count_refusal(source: str, status: int) -> None:
    """A request answered 4xx/5xx as a whole (a batch's items are counted one by one, as reports)."""
    if status >= 400:
        metrics.count_refused(source, REFUSAL_REASON.get(status, "error"))


def _guarded(request: HttpRequest, view: NodeView, max_bytes: int) -> HttpResponse:
    if request.method != "POST":
        return error_response(405, "Only POST is allowed here.", Allow="POST")
    node = authorized_node(request)
    if not isinstance(node, Node):
        return node
    try:
        data = read_json(request, max_bytes)
    except NotJson:
        return error_response(415, "The body must be sent as Content-Type: application/json.")
    except BodyTooLarge:
        return error_response(413, f"The body must be at most {max_bytes // 1024} KiB.")
    except OverBudget as exc:
        return error_response(400 if exc.limit == "depth" else 413, exc.message)
    except BodyError as exc:
        return error_response(400, exc.message, exc.field)
    nodes.touch_node(node)
    return view(request, node, data)


def authorized_node(request: HttpRequest) -> Node | JsonResponse:
    """The node of the request's bearer token, within its rate limit; else the 401 or 429 to answer."""
    node = _bearer_node(request)
    if node is None:
        return error_response(
            401, "A valid node token is required (Authorization: Bearer <token>).", WWW_Authenticate="Bearer"
        )
    retry_after = nodes.count_node_request(node)
    if retry_after is not None:
        return error_response(429, "Too many requests from this node.", Retry_After=str(retry_after))
    return node


def _bearer_node(request: HttpRequest) -> Node | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return nodes.authenticate_node(token.strip())


def json_budget(max_bytes: int) -> InputBudget:
    """The shared input budget of a node's JSON body."""
    return InputBudget.for_bytes("The body", max_bytes, JSON_DEPTH)


def read_json(request: HttpRequest, max_bytes: int) -> Any:
    """Parse the body as JSON within max_bytes, judged by Content-Length and by the bytes read, and
    within the shared input budget (values and depth counted before anything is built: OverBudget).

    Reads the stream directly: request.body would apply DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB),
    which is below the batch limit; our own limit is the one that counts here.
    """
    if request.content_type != "application/json":
        raise NotJson
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > max_bytes:
        raise BodyTooLarge
    raw = request.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise BodyTooLarge
    try:
        return input_budget.load_json(raw, json_budget(max_bytes), loads=_loads)
    except OverBudget:
        raise
    except ValueError:
        raise BodyError("The body is not valid JSON.", "") from None


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@node_json_endpoint(MAX_SINGLE_BYTES)
def report_create(request: HttpRequest, node: Node, data: Any) -> HttpResponse:
    try:
        item = _valid_report(data, "")
    except BodyError as exc:
        return error_response(400, exc.message, exc.field)
    outcome = reports.store_report(node, item, timezone.now())
    count_outcomes([outcome])
    queueing.request_ingests(_unknown_revisions([outcome]))
    queueing.request_node_check(node.pk)
    if outcome.result is Stored.CONFLICT:
        return _conflict_response()
    return JsonResponse(
        {"id": outcome.id, "duplicate": outcome.duplicate}, status=HTTP_STATUS[outcome.result]
    )


@node_json_endpoint(MAX_BATCH_BYTES)
def report_batch(request: HttpRequest, node: Node, data: Any) -> HttpResponse:
    try:
        bodies = validate_batch(data)
    except BodyError as exc:
        return error_response(400, exc.message, exc.field)
    results, valid = _each_item(bodies, _valid_report, "report")
    if valid:
        outcomes = reports.store_reports(node, [item for _, item in valid], timezone.now())
        count_outcomes(outcomes)
        queueing.request_ingests(_unknown_revisions(outcomes))
        queueing.request_node_check(node.pk)
        for (index, _), outcome in zip(valid, outcomes, strict=True):
            results[index].update(_item_result(outcome))
    return JsonResponse({"results": results}, status=200)


MAX_BASELINES_BYTES = 256 * 1024  # 100 windows of about 1 KiB each, with room


@node_json_endpoint(MAX_BASELINES_BYTES, source="baseline")
def baselines_create(request: HttpRequest, node: Node, data: Any) -> HttpResponse:
    """``POST /api/v1/baselines``: windows of a baseline engine's counters (meshdash-agent's ``baselines``),
    one result per report in order: 201 stored, 200 the same report again, 409 the id with another body,
    400 the item's first problem (the others are still stored)."""
    try:
        bodies = validate_baselines(data)
    except BodyError as exc:
        return error_response(400, exc.message, exc.field)
    results, valid = _each_item(bodies, validate_baseline, "baseline")
    if valid:
        stored = baselines.store_baselines(node, [item for _, item in valid], timezone.now())
        for (index, _), outcome in zip(valid, stored, strict=True):
            results[index].update(status=outcome.status, id=outcome.id)
            if outcome.status == 409:
                results[index].update(error=_CONFLICT_MESSAGE, field=f"reports.{index}.report_id")
            metrics.count_reports(
                "baseline", {201: "created", 200: "duplicate"}.get(outcome.status, "conflict")
            )
    return JsonResponse({"results": results}, status=200)


def _each_item(
    bodies: list[Any], validate: Callable[[Any, str], _Item], source: str
) -> tuple[list[dict[str, Any]], list[tuple[int, _Item]]]:
    """A batch's items validated one by one: a result per item (a 400 for a bad one, naming its field) and
    the valid items with their index; the refused ones counted."""
    results: list[dict[str, Any]] = [{"index": i} for i in range(len(bodies))]
    valid: list[tuple[int, _Item]] = []
    for index, body in enumerate(bodies):
        try:
            valid.append((index, validate(body, f"reports.{index}")))
        except BodyError as exc:
            results[index].update(status=400, error=exc.message, field=exc.field)
    metrics.count_reports(source, "invalid", len(bodies) - len(valid))
    return results, valid


def count_outcomes(outcomes: list[reports.StoreOutcome]) -> None:
    for outcome in outcomes:
        metrics.count_reports("report", outcome.result.value)


def _valid_report(data: Any, prefix: str) -> reports.ValidReport:
    report, digest = validate_report_body(data, prefix)
    return reports.ValidReport(report=report, digest=digest, body=data)


def _unknown_revisions(outcomes: list[reports.StoreOutcome]) -> list[tuple[str, str]]:
    return [o.unknown_revision for o in outcomes if o.unknown_revision is not None]


def _item_result(outcome: reports.StoreOutcome) -> dict[str, Any]:
    if outcome.result is Stored.CONFLICT:
        return {"status": 409, "error": _CONFLICT_MESSAGE, "field": "report_id"}
    return {"status": HTTP_STATUS[outcome.result], "id": outcome.id, "duplicate": outcome.duplicate}


_CONFLICT_MESSAGE = "This report_id was already stored with a different body."


def _conflict_response() -> JsonResponse:
    return error_response(409, _CONFLICT_MESSAGE, "report_id")


@csrf_exempt
def check_manifest_api(request: HttpRequest) -> HttpResponse:
    """``POST /api/v1/check-manifest``: the body is a model-package.json; the answer is its judgement."""
    if request.method != "POST":
        return error_response(405, "Only POST is allowed here.", Allow="POST")
    wait = ratelimit.retry_after(ratelimit.client_key(request, "check"), settings.MESHDASH_CHECK_RATE_LIMIT)
    if wait is not None:
        return error_response(429, "Too many checks from this address.", Retry_After=str(wait))
    signed_in = bool(request.user.is_authenticated)
    cap = check_budget.size_limit(signed_in)
    limit = check_budget.too_big_message(cap, signed_in)
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > cap:
        check_budget.drain(request, declared)
        return error_response(413, limit)
    try:
        # Reserved on the declared length, before the body is read: a refusal costs the worker nothing.
        with check_budget.reserve(declared):
            body = request.read(cap + 1)  # the stream, not request.body: our cap, not Django's 2.5 MiB
            if len(body) > cap:
                return error_response(413, limit)
            result, _ = judge_manifest(body, access.can_see_private(request.user))
    except check_budget.Busy as busy:
        return error_response(503, busy.message(), Retry_After=str(busy.retry_after))
    return JsonResponse(result.to_json())


@require_safe
def ping(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@require_safe
def openapi_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(openapi_document())


MAX_CERTIFY_BYTES = CERTIFY_MAX_BYTES


@node_json_endpoint(MAX_CERTIFY_BYTES, source="certify")
def certify_report_create(request: HttpRequest, node: Node, data: Any) -> HttpResponse:
    """``POST /api/v1/certify-reports``: a `mesh-llm models certify` JSON report, handed in by a node (its
    bearer token, as the timing reports): 201 stored, 200 the same report again, 400 a malformed one."""
    try:
        stored = certify_reports.store_certify_report(
            data, certified_by=f"node {node.name}", via=CertifyReport.Via.API, now=timezone.now()
        )
    except CertifyReportError as exc:
        return error_response(400, f"Not a models certify report: {exc.message}.", exc.field or None)
    body = certify_reports.report_json(stored.report, [stored.revision] if stored.revision else [])
    return JsonResponse(body | {"duplicate": not stored.created}, status=201 if stored.created else 200)


@csrf_exempt
def certify_reports_api(request: HttpRequest) -> HttpResponse:
    """``/api/v1/certify-reports``: POST hands one in (a node's token), GET lists those the reader may see,
    those for bytes meshdash does not track included for a reader who may see private packages."""
    if request.method != "GET":
        return certify_report_create(request)
    if not (settings.MESHDASH_PUBLIC_READ or request.user.is_authenticated):  # it skips the login middleware
        return error_response(401, "Sign in first: this dashboard is not public.")
    show_private = access.can_see_private(request.user)
    rows = certify_reports.visible_certify_reports(show_private)
    held = certify_reports.revisions_by_manifest(rows, show_private)
    results = [certify_reports.report_json(r, held.get(r.manifest_sha256, [])) for r in rows]
    return JsonResponse({"results": results})
