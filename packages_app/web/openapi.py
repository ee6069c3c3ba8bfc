"""The OpenAPI 3.1 document of the JSON API, built as a dict from one small function per path.

To document a new endpoint, write a ``_path_...`` function returning ``(path, path_item)`` and add
it to PATHS; add its pydantic models to SCHEMA_MODELS. Schemas come from the pydantic models.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from packages_app.audit.certify_report import MAX_REPORT_BYTES
from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.nodes.report_schema import (
    MAX_BATCH,
    BaselineReportIn,
    BaselinesIn,
    BatchIn,
    BatchOut,
    ErrorOut,
    ReportAccepted,
    ReportIn,
)
from packages_app.nodes.run_schema import RunIn, RunsIn
from packages_app.web.api_shapes import (
    CertifyReportOut,
    ManifestCheckOut,
    NodeDetailOut,
    PackageDetailOut,
    PackageListOut,
    catalog_query_parameters,
)

PathItem = tuple[str, dict[str, Any]]
JsonMode = Literal["validation", "serialization"]

SCHEMA_MODELS: list[tuple[type[BaseModel], JsonMode]] = [
    (ReportIn, "validation"),
    (BatchIn, "validation"),
    (RunsIn, "validation"),
    (BaselinesIn, "validation"),
    (BaselineReportIn, "validation"),
    (RunIn, "validation"),
    (ReportAccepted, "serialization"),
    (BatchOut, "serialization"),
    (ErrorOut, "serialization"),
    (PackageListOut, "serialization"),
    (PackageDetailOut, "serialization"),
    (ManifestCheckOut, "serialization"),
    (CertifyReportOut, "serialization"),
    (NodeDetailOut, "serialization"),
]


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def error(description: str, **headers: dict[str, Any]) -> dict[str, Any]:
    answer = {"description": description, **json_content(ref("ErrorOut"))}
    if headers:
        answer["headers"] = {name.replace("_", "-"): spec for name, spec in headers.items()}
    return answer


def node_errors() -> dict[str, Any]:
    """Answers every node endpoint can give besides its success."""
    return {
        "400": error("Malformed JSON or an invalid report; `field` is the dotted path of the culprit."),
        "401": error("Missing, wrong or revoked node token."),
        "405": error("Only POST is allowed."),
        "413": error("Body over the size limit."),
        "415": error("Content-Type is not application/json."),
        "429": error(
            "Over the node's rate limit.",
            Retry_After={"description": "Seconds to wait.", "schema": {"type": "integer"}},
        ),
    }


def _path_reports() -> PathItem:
    responses = {
        "201": {"description": "Stored.", **json_content(ref("ReportAccepted"))},
        "200": {"description": "A verbatim replay; nothing stored.", **json_content(ref("ReportAccepted"))},
        "409": error("This report_id was already stored with a different body."),
        **node_errors(),
    }
    operation = {
        "operationId": "report_create",
        "summary": "Post one timing report (at most 64 KiB).",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, **json_content(ref("ReportIn"))},
        "responses": responses,
    }
    return "/api/v1/reports", {"post": operation}


def _path_reports_batch() -> PathItem:
    operation = {
        "operationId": "report_batch",
        "summary": f"Post up to {MAX_BATCH} reports (at most 4 MiB); one result per item, in order.",
        "description": "Each result's `status` is what the single endpoint would have answered.",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, **json_content(ref("BatchIn"))},
        "responses": {"200": {"description": "Per-item results.", **json_content(ref("BatchOut"))}}
        | node_errors(),
    }
    return "/api/v1/reports/batch", {"post": operation}


def _path_check_manifest() -> PathItem:
    body = {"type": "string", "format": "binary", "maxLength": MAX_MANIFEST_BYTES}
    operation = {
        "operationId": "check_manifest",
        "summary": "Judge one model-package.json as mesh-llm does (no login, rate-limited per address).",
        "description": (
            "The body is the manifest file itself (any Content-Type, at most 16 MiB signed in, "
            "MESHDASH_CHECK_ANON_MAX_BYTES (4 MiB) without login). The answer is 200 for "
            "every manifest, valid or not: `valid` is mesh-llm's verdict, `problems` carry its own codes "
            "(meshdash's own findings are warnings or info), `runtime` maps each speculative.strategy "
            "setting to native-mtp, no-mtp, load-fails or refused, `compatibility` lists the releases."
        ),
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {
            "200": {"description": "The judgement.", **json_content(ref("ManifestCheckOut"))},
            "405": error("Only POST is allowed."),
            "413": error("The manifest is over the size cap (4 MiB anonymous, 16 MiB signed in)."),
            "429": error(
                "Over the per-address rate limit.",
                Retry_After={"description": "Seconds to wait.", "schema": {"type": "integer"}},
            ),
            "503": error(
                "The site's budget of manifest checks in flight is spent; nothing was checked.",
                Retry_After={"description": "Seconds to wait.", "schema": {"type": "integer"}},
            ),
        },
    }
    return "/api/v1/check-manifest", {"post": operation}


def _path_certify_reports() -> PathItem:
    report = {
        "type": "object",
        "description": "The JSON `mesh-llm models certify` writes (schema_version 1): status, input, "
        "resolved_package_ref, model_id, manifest_sha256, layer_count, package_gate, materialized_stages, "
        "runtime_gates (docs/rules.md section 6b).",
        "required": ["schema_version", "status", "manifest_sha256", "package_gate", "runtime_gates"],
        "maxProperties": 64,
    }
    post = {
        "operationId": "certify_report_create",
        "summary": f"Hand in one `mesh-llm models certify` report (at most {MAX_REPORT_BYTES // 1024} KiB).",
        "description": "Authenticated like the timing reports: a node's bearer token, which names who "
        "certified it. Stored once per report (a replay answers 200), whether or not meshdash tracks the "
        "revision whose manifest_sha256 it names.",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, **json_content(report)},
        "responses": {
            "201": {"description": "Stored.", **json_content(ref("CertifyReportOut"))},
            "200": {
                "description": "The same report again; nothing stored.",
                **json_content(ref("CertifyReportOut")),
            },
            **node_errors(),
        },
    }
    listed = {
        "type": "object",
        "properties": {"results": {"type": "array", "items": ref("CertifyReportOut")}},
    }
    get = {
        "operationId": "certify_reports_list",
        "summary": "The certify reports a reader may see (untracked: to readers of private ones).",
        "responses": {"200": {"description": "The reports.", **json_content(listed)}},
    }
    return "/api/v1/certify-reports", {"post": post, "get": get}


def _path_runs() -> PathItem:
    results = {"type": "object", "properties": {"results": {"type": "array", "items": {"type": "object"}}}}
    operation = {
        "operationId": "runs_register",
        "summary": "meshdash-agent: its node's runs (run id -> package revision, topology, devices).",
        "description": "Each result: `index`, `status` (200 or 400), `revision_linked`, `reports_linked`.",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, **json_content(ref("RunsIn"))},
        "responses": {"200": {"description": "Per-run results.", **json_content(results)}} | node_errors(),
    }
    return "/api/v1/runs", {"post": operation}


def _path_baselines() -> PathItem:
    results = {"type": "object", "properties": {"results": {"type": "array", "items": {"type": "object"}}}}
    operation = {
        "operationId": "baselines_create",
        "summary": "meshdash-agent: windows of a baseline engine's /metrics (plain llama.cpp or vLLM).",
        "description": "Items are BaselineReportIn. Each result: `index`, `status` (201 stored, 200 the "
        "same report again, 409 the id with another body, 400 with `error` and `field`), `id`. Bodies "
        "over 256 KiB get 413.",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, **json_content(ref("BaselinesIn"))},
        "responses": {"200": {"description": "Per-report results.", **json_content(results)}} | node_errors(),
    }
    return "/api/v1/baselines", {"post": operation}


def _path_traces() -> PathItem:
    otlp = {
        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"type": "object"}},
    }
    operation = {
        "operationId": "otlp_traces",
        "summary": "OTLP/HTTP trace export; stage.openai_decode spans become reports (gzip accepted).",
        "description": "An ExportTraceServiceRequest as protobuf or OTLP/JSON; the answer is an "
        "ExportTraceServiceResponse in the same encoding, with partial_success counting the spans not "
        "stored and why. Bodies over 8 MiB, compressed or inflated, get 413.",
        "security": [{"nodeToken": []}],
        "requestBody": {"required": True, "content": otlp},
        "responses": {"200": {"description": "ExportTraceServiceResponse.", "content": otlp}} | node_errors(),
    }
    return "/v1/traces", {"post": operation}


def _path_ping() -> PathItem:
    ok = {"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]}
    operation = {
        "operationId": "ping",
        "summary": "Health check.",
        "responses": {"200": {"description": "The web process answers.", **json_content(ok)}},
    }
    return "/api/v1/ping", {"get": operation}


def _path_openapi() -> PathItem:
    operation = {
        "operationId": "openapi",
        "summary": "This document.",
        "responses": {"200": {"description": "OpenAPI 3.1.", **json_content({"type": "object"})}},
    }
    return "/api/v1/openapi.json", {"get": operation}


def _path_hub_webhook() -> PathItem:
    queued = {
        "type": "object",
        "properties": {
            "queued": {"type": "boolean"},
            "repo": {"type": "string"},
            "head_sha": {"type": ["string", "null"]},
            "pull_request": {"type": "integer"},
            "reason": {"type": "string", "description": "Why nothing was queued (200)."},
        },
        "required": ["queued", "repo"],
    }
    event = {
        "type": "object",
        "description": "The Hub's webhook payload (huggingface_hub's WebhookPayload; docs/domain.md "
        "section 8): event {action, scope}, repo {type, name, headSha}, and for discussion events "
        "discussion {num, isPullRequest}. Every field is validated; the sync reads the Hub again, so the "
        "body is never trusted.",
        "properties": {
            "event": {"type": "object"},
            "repo": {"type": "object"},
            "discussion": {"type": "object"},
        },
        "required": ["event", "repo"],
    }
    operation = {
        "operationId": "hub_webhook",
        "summary": "The Hub's webhook: a repo update of a followed package queues its sync; an event about a "
        "pull request meshdash opened queues a check of it.",
        "description": "Authenticated by the X-Webhook-Secret header (MESHDASH_WEBHOOK_SECRET); 404 while no "
        "secret is configured. Bodies over 256 KiB get 413.",
        "parameters": [
            {"name": "X-Webhook-Secret", "in": "header", "required": True, "schema": {"type": "string"}}
        ],
        "requestBody": {"required": True, "content": {"application/json": {"schema": event}}},
        "responses": {
            "202": {"description": "A sync (or a pull request check) was queued.", **json_content(queued)},
            "200": {
                "description": "The event is not for this server; nothing queued.",
                **json_content(queued),
            },
            "400": error("The body is not a webhook payload meshdash understands."),
            "403": error("The secret header does not match."),
            "404": error("Webhooks are disabled here (no secret configured)."),
            "405": error("Only POST is allowed.", Allow={"schema": {"type": "string"}}),
            "413": error("The body is over 256 KiB."),
            "415": error("The body is not application/json."),
            "503": error(
                "The task queue is unavailable.", **{"Retry-After": {"schema": {"type": "integer"}}}
            ),
        },
    }
    return "/api/v1/hooks/hub", {"post": operation}


def read_errors() -> dict[str, Any]:
    """Answers every read-only package endpoint can give besides its success."""
    return {"405": error("Only GET and HEAD are allowed; this API is read-only.")}


def _path_packages() -> PathItem:
    operation = {
        "operationId": "packages_list",
        "summary": "The catalog: packages with their latest revision's audit, filtered, sorted, paginated.",
        "parameters": catalog_query_parameters(),
        "responses": {
            "200": {"description": "One page.", **json_content(ref("PackageListOut"))},
            "400": error("A filter parameter is invalid; the message names it."),
            "404": error("The page is past the last page."),
            **read_errors(),
        },
    }
    return "/api/v1/packages", {"get": operation}


def _path_package() -> PathItem:
    revision = {
        "name": "revision",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "pattern": "^[0-9a-fA-F]{4,40}$"},
        "description": "A commit sha or a unique prefix of at least 4 hex digits; default the latest.",
    }
    operation = {
        "operationId": "package_detail",
        "summary": "One package: the audit of a revision, its history, throughput and alerts.",
        "parameters": [_path_parameter("owner"), _path_parameter("name"), revision],
        "responses": {
            "200": {"description": "The package.", **json_content(ref("PackageDetailOut"))},
            "400": error("The revision prefix matches several revisions."),
            "404": error("No such package, or no such revision of it."),
            **read_errors(),
        },
    }
    return "/api/v1/packages/{owner}/{name}", {"get": operation}


def _path_node() -> PathItem:
    days = {
        "name": "days",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "enum": [1, 7, 30, 90]},
        "description": "The window, as on the node's page (default 7).",
    }
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 100}}
    operation = {
        "operationId": "node_detail",
        "summary": "One node: what it served, the advice for each revision, what it says about itself.",
        "parameters": [name, days],
        "responses": {
            "200": {"description": "The node.", **json_content(ref("NodeDetailOut"))},
            "404": error("No node of that name is registered."),
            **read_errors(),
        },
    }
    return "/api/v1/nodes/{name}", {"get": operation}


def _path_parameter(name: str) -> dict[str, Any]:
    schema = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,96}$"}
    return {"name": name, "in": "path", "required": True, "schema": schema}


PATHS: list[Callable[[], PathItem]] = [
    _path_reports,
    _path_reports_batch,
    _path_runs,
    _path_baselines,
    _path_traces,
    _path_ping,
    _path_openapi,
    _path_packages,
    _path_package,
    _path_node,
    _path_check_manifest,
    _path_certify_reports,
    _path_hub_webhook,
]


def component_schemas() -> dict[str, Any]:
    _, top = models_json_schema(SCHEMA_MODELS, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = top.get("$defs", {})
    return schemas


@cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "meshdash API",
            "version": "1",
            "description": "Serving nodes post timing reports; the dashboard reads packages.",
        },
        "paths": dict(build() for build in PATHS),
        "components": {
            "schemas": component_schemas(),
            "securitySchemes": {"nodeToken": {"type": "http", "scheme": "bearer"}},
        },
    }
