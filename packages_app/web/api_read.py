"""The read-only JSON API: ``GET /api/v1/packages``, ``GET /api/v1/packages/<owner>/<name>`` and
``GET /api/v1/nodes/<name>`` (what a node ran, what it says about itself, and the advice for each).

Same filters and selectors as the HTML catalog; every error is ``{"error": "<one sentence>"}``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.core.paginator import EmptyPage
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from pydantic import BaseModel, Field

from packages_app import certify_reports, queries, verdicts
from packages_app.audit.advice import Advice
from packages_app.audit.assessment import Assessment
from packages_app.fleet.nodes import node_rows
from packages_app.fleet.plans import PlanAdvice, plan_advice
from packages_app.fleet.served import ServedRevision
from packages_app.fleet.serving import NodeServing
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.models import Package, Revision
from packages_app.throughput import Plan, RevisionThroughput, revision_throughput
from packages_app.web import access
from packages_app.web.forms import WINDOW_DAYS, CatalogFilterForm

JsonView = Callable[..., JsonResponse]


def error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def read_only(view: JsonView) -> JsonView:
    """GET (and HEAD) only; lookup failures become JSON 404/400 instead of HTML pages."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        if request.method not in ("GET", "HEAD"):
            response = error(f"{request.method} is not allowed here; this API is read-only (use GET).", 405)
            response["Allow"] = "GET, HEAD"
            return response
        try:
            return view(request, *args, **kwargs)
        except queries.LookupFailed as exc:
            return error(str(exc), 404)
        except queries.AmbiguousRevision as exc:
            return error(str(exc), 400)

    return wrapper


@read_only
def packages_list(request: HttpRequest) -> JsonResponse:
    form = CatalogFilterForm(request.GET)
    unknown = form.unknown_parameters()
    if unknown:
        known = ", ".join(form.fields)
        return error(f"Unknown query parameter(s): {', '.join(unknown)}; known: {known}.", 400)
    if not form.is_valid():
        return error("Invalid filter: " + "; ".join(form.error_sentences()), 400)
    try:
        result = queries.catalog_page(
            form.filters(),
            form.page_number(),
            form.page_size(),
            clamp=False,
            show_private=access.can_see_private(request.user),
        )
    except EmptyPage:
        return error(f"Page {form.page_number()} is past the last page of results.", 404)
    page = result.page
    return JsonResponse(
        {
            "count": page.paginator.count,
            "page": page.number,
            "pages": page.paginator.num_pages,
            "per_page": page.paginator.per_page,
            "next": _page_url(request, page.next_page_number()) if page.has_next() else None,
            "previous": _page_url(request, page.previous_page_number()) if page.has_previous() else None,
            "facets": {"headline": result.headlines, "verdict": result.facets},
            "results": [_catalog_row_json(row) for row in result.rows],
        }
    )


def _page_url(request: HttpRequest, number: int) -> str:
    params = request.GET.copy()
    params["page"] = str(number)
    return f"{request.path}?{params.urlencode()}"


def _catalog_row_json(row: queries.CatalogRow) -> dict[str, Any]:
    headline = row.headline.to_json() if row.headline else None
    return {
        "repo_id": row.package.repo_id,
        "url": _package_api_url(row.package),
        "headline": headline,
        "latest_revision": _revision_summary(row.revision, headline) if row.revision else None,
        "throughput": _rounded_figures(row.throughput.as_dict()) if row.throughput else None,
        "alert": row.alert,
        "reason": row.headline.sentence if row.headline and row.status.needs_action else None,
        "served_revisions": [_served_json(s) for s in row.served],
    }


def _served_json(served: ServedRevision) -> dict[str, Any]:
    return {
        "commit_sha": served.commit_sha,
        "status": served.status.value,
        "verdict": served.verdict or None,
        "nodes": served.nodes,
        "reports": served.reports,
        "alert": served.alert,
        "reason": served.reason or None,
        "action": served.action or None,
    }


def _rounded_figures(figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """Floats rounded to what a decode rate means (2 decimals, 3 for a rate in 0..1)."""
    if figures is None:
        return None
    return {key: _rounded(key, value) for key, value in figures.items()}


def _rounded(key: str, value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3 if key.endswith("rate") else 2)
    if isinstance(value, dict):
        return _rounded_figures(value)
    if isinstance(value, list):
        return [_rounded_figures(v) if isinstance(v, dict) else v for v in value]
    return value


def _package_api_url(package: Package) -> str:
    return reverse("packages_app:api_package", args=[package.owner, package.name])


def _revision_summary(revision: Revision, headline: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "commit_sha": revision.commit_sha,
        "headline": headline,
        # Why there is no headline, worded as every page words it (verdicts.not_assessed).
        "not_assessed": None if headline else _not_assessed(revision),
        "mtp": {
            "verdict": revision.verdict or None,
            "declared": revision.mtp_declared,
            "detected": revision.mtp_detected,
        },
        "committed_at": revision.committed_at,
        "status": revision.status,
        "files_total": revision.files_total,
        "files_done": revision.files_done,
        "error": revision.error or None,
        "schema_version": revision.schema_version,
        "architecture": revision.architecture or None,
        "block_count": revision.block_count,
        "nextn_predict_layers": revision.nextn_predict_layers,
        # 0 means "not measured yet" (ingest unfinished): unknown, so null.
        "total_bytes": revision.total_bytes or None,
        "verdict": revision.verdict or None,
        "mtp_detected": revision.mtp_detected,
        "mtp_declared": revision.mtp_declared,
        "refused_by": revision.refused_releases,
    }


@read_only
def package_detail(request: HttpRequest, owner: str, name: str) -> JsonResponse:
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    revision = queries.resolve_revision(package, request.GET.get("revision"))
    history = queries.revision_history(package)
    assessment = Assessment.from_json(revision.assessment) if revision else None
    headline = assessment.headline.to_json() if assessment else None
    body: dict[str, Any] = {
        "repo_id": package.repo_id,
        "sync_error": package.sync_error or None,
        "revision": _revision_summary(revision, headline) if revision else None,
        "assessment": assessment.to_json() if assessment else None,
        "revisions": [_history_entry(r) for r in history],
        "model_card": package_card_json(package),
        "catalog": package.catalog_rows if isinstance(package.catalog_rows, list) else [],
        "certify_reports": [
            certify_reports.report_json(r, [revision])
            for r in certify_reports.revision_certify_reports(revision)
        ]
        if revision
        else [],
    }
    body.update(_audit_json(revision) if revision else _empty_audit())
    return JsonResponse(body)


def package_card_json(package: Package) -> dict[str, Any]:
    """The package's model card facts: its source model (base_model) and whether it is experimental."""
    tags = [t for t in package.card_tags if isinstance(t, str)] if isinstance(package.card_tags, list) else []
    return {"base_model": package.base_model or None, "experimental": package.experimental, "tags": tags}


def _not_assessed(revision: Revision) -> dict[str, object]:
    return verdicts.not_assessed(revision.status, revision.error or "", settings.MESHDASH_HUB_DEV).to_json()


def _history_entry(revision: Revision) -> dict[str, Any]:
    return {
        "commit_sha": revision.commit_sha,
        "committed_at": revision.committed_at,
        "title": revision.title,
        "status": revision.status,
        "headline_status": revision.headline or None,
        "verdict": revision.verdict or None,
    }


def _audit_json(revision: Revision) -> dict[str, Any]:
    audited = revision.audited
    throughput = revision_throughput(revision.pk, page=False)
    assessment = Assessment.from_json(revision.assessment)
    judged = plan_advice(revision.pk, assessment, throughput.plans) if throughput else []
    alert = asdict(throughput.alert) if throughput and throughput.alert else None
    return {
        "verdict": revision.verdict or None,
        **audited.to_json(),
        "throughput": _throughput_summary(throughput, judged),
        "alerts": [alert] if alert else [],
    }


def _empty_audit() -> dict[str, Any]:
    keys = (
        "verdict",
        "detected",
        "declared",
        "provenance",
        "runtime",
        "suggested_generation",
        "request_defaults",
        "throughput",
    )
    return {**dict.fromkeys(keys), "problems": [], "alerts": [], "compatibility": []}


def _throughput_summary(
    throughput: RevisionThroughput | None, judged: list[PlanAdvice] | None = None
) -> dict[str, Any] | None:
    if not throughput:
        return None
    plans = [{**_plan_json(p.plan), "advice": advice_json(p.advice)} for p in judged or []]
    # The time series and the raw recent reports stay on the HTML page; the API gives the figures.
    return _rounded_figures(
        {
            "mtp_on": asdict(throughput.mtp_on),
            "mtp_off": asdict(throughput.mtp_off),
            "by_strategy": [asdict(row) for row in throughput.by_strategy],
            "acceptance_rate": throughput.acceptance_rate,
            "mean_accepted_length": throughput.mean_accepted_length,
            "stage_splits": throughput.stage_splits,
            "moved": throughput.moved,
            "refused": throughput.refused,
            "plans": plans or [_plan_json(plan) for plan in throughput.plans],
        }
    )


def _plan_json(plan: Plan) -> dict[str, Any]:
    return {**vars(plan), "last_seen": plan.last_seen.isoformat() if plan.last_seen else None}


def advice_json(advice: Advice) -> dict[str, Any]:
    """One advice as every surface gives it: its cause, the sentence, and what it rests on."""
    return {
        "cause": advice.cause.value,
        "label": advice.cause.label,
        "needs_action": advice.needs_action,
        "text": advice.text,
        "observed": advice.observed or None,
        "release": advice.release,
        "predicted": advice.predicted or None,
        "prediction": advice.prediction or None,
        "observation": advice.observation or None,
    }


@read_only
def node_detail(request: HttpRequest, name: str) -> JsonResponse:
    """One node: what it served in the window (``days``, as on its page), the advice for each revision,
    and what it says about itself (its newest run's observations)."""
    raw = request.GET.get("days", "")
    days = int(raw) if raw.isdigit() and int(raw) in WINDOW_DAYS else DEFAULT_WINDOW_DAYS
    rows = node_rows(window_start(days), name=name, show_private=access.can_see_private(request.user))
    if not rows:
        return error(f"No node named {name} is registered.", 404)
    row = rows[0]
    return JsonResponse(
        {
            "name": row.node.name,
            "version": row.version or None,
            "devices": row.devices,
            "certification": row.certification or None,
            "needs_action": row.needs_action,
            "days": days,
            "observations": row.observations or {},
            "serving": [_serving_json(s) for s in row.serving],
        }
    )


def _serving_json(s: NodeServing) -> dict[str, Any]:
    return {
        "repo_id": s.repo_id,
        "commit_sha": s.commit_sha,
        "status": s.status.value,
        "is_latest": s.is_latest,
        "identity": s.identity or None,
        "identity_label": s.identity_label or "named in reports",
        "stage_splits": s.stage_splits,
        "topology_id": s.topology_id,
        "reports": s.reports,
        "tps": s.tps,
        "requested_strategy": s.requested,
        "effective_strategy": s.effective,
        "version": s.version or None,
        "advice": advice_json(s.advice),
    }


# --- the response shapes, for the OpenAPI document (openapi.py) and the tests -------------------


DEPRECATED = (
    "Deprecated: kept for one version; read the assessment's fields (headline, mtp, servable) instead."
)


class ActionOut(BaseModel):
    kind: str = Field(description="fix-manifest | republish-v2 | split-override | apply-patch | ...")
    label: str
    text: str = Field(description="One sentence with the specifics.")
    command: str = Field(description="A command to copy, when the action is one ('' otherwise).")


class HeadlineOut(BaseModel):
    """The one answer every surface leads with (packages_app.audit.assessment.Headline)."""

    status: str = Field(
        description="A status of the vocabulary (GET /glossary/#statuses), worst first by rank."
    )
    label: str
    tone: str = Field(description="bad | warn | info | good | none")
    rank: int = Field(description="0 is the worst.")
    sentence: str
    release: str = Field(description="The mesh-llm release it is judged on: the newest the matrix knows.")
    action: ActionOut


class MtpOut(BaseModel):
    """Declared vs detected MTP (the verdict); ``detected`` is null when the weights were not read."""

    verdict: str | None
    declared: bool | None
    detected: bool | None


class NotAssessedOut(BaseModel):
    """Why a revision has no headline yet, as the package page and the catalog say it."""

    status: str = Field(description="Always not-assessed.")
    label: str = Field(
        description='e.g. "not assessed yet", "not assessed: gated", "not assessed: ingest failed".'
    )
    sentence: str


class RevisionSummaryOut(BaseModel):
    commit_sha: str
    headline: HeadlineOut | None
    not_assessed: NotAssessedOut | None = Field(
        description="Why there is no headline; null when there is one."
    )
    mtp: MtpOut
    committed_at: datetime | None
    status: str
    files_total: int
    files_done: int
    error: str | None
    schema_version: int | None
    architecture: str | None
    block_count: int | None
    nextn_predict_layers: int | None
    total_bytes: int | None
    verdict: str | None = Field(deprecated=True, description=DEPRECATED + " (mtp.verdict)")
    mtp_detected: bool | None = Field(deprecated=True, description=DEPRECATED + " (mtp.detected)")
    mtp_declared: bool | None = Field(deprecated=True, description=DEPRECATED + " (mtp.declared)")
    refused_by: list[str] = Field(description="mesh-llm releases (releases.toml) that refuse this revision.")


class CatalogThroughputOut(BaseModel):
    tps_mtp: float | None
    tps_no_mtp: float | None
    reports: int
    alert: bool


class ServedRevisionOut(BaseModel):
    """A revision other than the latest that nodes reported running inside the window (``days``)."""

    commit_sha: str
    status: str = Field(description="Its headline status.")
    verdict: str | None
    nodes: int
    reports: int
    alert: bool
    reason: str | None = Field(description="Its headline sentence (or why the alert).")
    action: str | None = Field(description="Its headline action.")


class PackageRowOut(BaseModel):
    repo_id: str
    url: str
    headline: HeadlineOut | None = Field(description="The latest revision's headline; null until assessed.")
    latest_revision: RevisionSummaryOut | None
    throughput: CatalogThroughputOut | None
    alert: bool
    reason: str | None
    served_revisions: list[ServedRevisionOut]


class PackageListOut(BaseModel):
    """``GET /api/v1/packages``: one page of the catalog; ``facets.headline`` counts packages per status,
    ``facets.verdict`` per MTP verdict, each as its filter would list them."""

    count: int
    page: int
    pages: int
    per_page: int
    next: str | None
    previous: str | None
    facets: dict[str, dict[str, int]]
    results: list[PackageRowOut]


class HistoryEntryOut(BaseModel):
    commit_sha: str
    committed_at: datetime | None
    title: str
    status: str = Field(description="The ingest status.")
    headline_status: str | None = Field(description="The headline status; null until assessed.")
    verdict: str | None


class AlertOut(BaseModel):
    message: str
    reports: int
    nodes: int


class StrategyPlanOut(BaseModel):
    node: str
    stage_splits: str
    requested_strategy: str
    effective_strategy: str
    differs: bool = Field(
        description="A request of a known kind (mtp, disabled, ngram-*) ran as something else."
    )
    reports: int
    from_spans: int = Field(description="How many of the reports came from OTLP stage.openai_decode spans.")
    tps: float | None
    last_seen: datetime | None
    unused: int = Field(default=0, description="Its reports showing MTP weights unused.")
    advice: AdviceOut | None = Field(default=None, description="The node's advice, judged on its release.")


class AdviceOut(BaseModel):
    """What a node should do about a revision (packages_app.audit.advice.Advice), the same sentence as its
    pages give."""

    cause: str = Field(description="A cause of the vocabulary (GET /glossary/#causes).")
    label: str
    needs_action: bool
    text: str
    observed: str | None = Field(
        description="The node's own fact it rests on: serving-strategy, sidecar-draft, "
        "manifest-declares-none, operator-setting, served-bytes; 'predicted' when the node says nothing "
        "and the prediction stays; "
        "'break-even-gate (possible)' for a cause mesh-llm reports no signal for."
    )
    release: str | None
    predicted: str | None
    prediction: str | None = Field(description="A contradiction's predicted side.")
    observation: str | None = Field(description="A contradiction's observed side.")


class NodeServingOut(BaseModel):
    repo_id: str
    commit_sha: str
    status: str
    is_latest: bool
    identity: str | None = Field(description="confirmed | other | unaudited; null: the node names no bytes.")
    identity_label: str
    stage_splits: str
    topology_id: str
    reports: int
    tps: float | None
    requested_strategy: str
    effective_strategy: str
    version: str | None
    advice: AdviceOut


class NodeDetailOut(BaseModel):
    """One node (GET /api/v1/nodes/<name>)."""

    name: str
    version: str | None
    devices: list[str]
    certification: str | None
    needs_action: bool
    days: int
    observations: dict[str, Any] = Field(
        description="What the node says about itself (docs/node-report.md section 5), as registered."
    )
    serving: list[NodeServingOut]


class ThroughputSummaryOut(BaseModel):
    mtp_on: dict[str, Any]
    mtp_off: dict[str, Any]
    by_strategy: list[dict[str, Any]]
    acceptance_rate: float | None
    mean_accepted_length: float | None
    stage_splits: list[str]
    moved: int = Field(0, description="Reports placed when observed, over 5 minutes before they arrived.")
    refused: int = Field(0, description="Reports whose observed time was not believed: placed at arrival.")
    plans: list[StrategyPlanOut] = Field(
        default_factory=list, description="Requested vs effective strategy per node and topology."
    )


class SplitOut(BaseModel):
    """Split serving on one release: the package verdict and its split-certification gate."""

    admitted: bool | None = Field(description="null: not pinned down.")
    why: str
    gate: bool | None = Field(description="The gate alone: the architecture on the release's roster.")
    architecture: str = Field("", description="The carrier's general.architecture it judged; '' if unread.")
    roster_inferred: bool = Field(
        False, description="The release's roster is inferred from its Skippy ABI, not read for its tag."
    )
    gate_unjudged: bool = Field(False, description="The roster is known but no metadata carrier was read.")


class ServableOut(BaseModel):
    release: str
    admitted: bool | None = Field(description="null: not pinned down in mesh-llm's code.")
    why: str
    split: SplitOut | None = None


class SettingOutcomeOut(BaseModel):
    outcome: str = Field(description="native-mtp | no-mtp | load-fails | refused")
    why: str


class ReleaseOutcomesOut(BaseModel):
    release: str
    pinned: bool = Field(description="False where the release's admission is not pinned down.")
    settings: dict[str, SettingOutcomeOut] = Field(description="speculative.strategy -> outcome.")


class AssessmentOut(BaseModel):
    """The one answer for a revision, a folder or a manifest (packages_app.audit.assessment.Assessment)."""

    scope: str = Field(description="revision | folder | manifest")
    headline: HeadlineOut
    mtp: dict[str, Any] = Field(description="verdict, declared, detected, blocks, declared_layers.")
    servable: list[ServableOut]
    outcomes: list[ReleaseOutcomesOut]
    cannot_see: list[str] = Field(description="What this check could not see (e.g. the weights).")


class ModelCardOut(BaseModel):
    base_model: str | None = Field(description="The source model the card names (base_model).")
    experimental: bool = Field(description="The card's experimental tag (mesh-llm's writer warns with it).")
    tags: list[str]


class CatalogRowOut(BaseModel):
    entry: str
    variant: str
    source_repo: str
    source_revision: str = Field(description="The source model's revision, not the package's.")
    layer_count: int | None


class CertifyRevisionOut(BaseModel):
    repo_id: str
    commit_sha: str


class CertifyReportOut(BaseModel):
    """One `mesh-llm models certify` report as meshdash stored it."""

    status: str = Field(description="passed | failed | incomplete | not_required")
    summary: str = Field(description="passed, failed at <gate>, incomplete (<gates>), not required")
    failed_gate: str | None
    manifest_sha256: str
    model_id: str
    resolved_package_ref: str
    layer_count: int
    certified_by: str = Field(description="The node (its token) or user that handed it in.")
    received_at: str
    via: str = Field(description="import | api")
    revision: CertifyRevisionOut | None = Field(description="The revision with these bytes; null: untracked.")


class PackageDetailOut(BaseModel):
    """``GET /api/v1/packages/{owner}/{name}``: one revision's assessment, and the audit behind it."""

    repo_id: str
    sync_error: str | None
    revision: RevisionSummaryOut | None
    assessment: AssessmentOut | None
    revisions: list[HistoryEntryOut]
    verdict: str | None = Field(deprecated=True, description=DEPRECATED + " (assessment.mtp.verdict)")
    detected: dict[str, Any] | None
    declared: dict[str, Any] | None
    problems: list[dict[str, Any]]
    provenance: dict[str, Any] | None
    runtime: dict[str, Any] | None = Field(deprecated=True, description=DEPRECATED + " (assessment.outcomes)")
    compatibility: list[dict[str, Any]] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.servable)"
    )
    suggested_generation: dict[str, Any] | None
    request_defaults: dict[str, Any] | None = Field(
        description="What generation.request_defaults sets: each profile's values, which profile each "
        "reasoning mode gets (default_profile: a request that says nothing), publisher dtype defaults."
    )
    throughput: ThroughputSummaryOut | None
    alerts: list[AlertOut]
    model_card: ModelCardOut | None = None
    catalog: list[CatalogRowOut] = Field(
        default_factory=list, description="The curated catalog's rows that list this package."
    )
    certify_reports: list[CertifyReportOut] = Field(
        default_factory=list,
        description="`mesh-llm models certify` reports for this revision's manifest bytes, newest first.",
    )


def catalog_query_parameters() -> list[dict[str, Any]]:
    """The catalog filters as OpenAPI query parameters, read from the form so the two never drift."""
    return [_query_parameter(name, field) for name, field in CatalogFilterForm.base_fields.items()]


def _query_parameter(name: str, field: forms.Field) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer" if isinstance(field, forms.IntegerField) else "string"}
    if isinstance(field, forms.ChoiceField):
        choices: Any = field.choices  # always a list of pairs on this form
        schema["enum"] = [str(value) for value, _ in choices if value != ""]
    if isinstance(field, forms.BooleanField):
        schema = {"type": "boolean"}
    description = str(field.label or name.replace("_", " ").capitalize())
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


# --- POST /api/v1/check-manifest (documented here with the other answer models) -----------------


class CheckProblemOut(BaseModel):
    code: str
    severity: str
    message: str
    path: str | None


class PackageIdOut(BaseModel):
    declared: str | None
    computed: str | None
    matches: bool | None


class ResolutionOut(BaseModel):
    outcome: str  # native-mtp | no-mtp | load-fails | refused
    why: str


class AdmissionOut(BaseModel):
    release: str
    admitted: bool | None  # null: mesh-llm's behaviour for this release is not pinned down
    why: str


class ManifestCheckOut(BaseModel):
    """One model-package.json judged as mesh-llm judges it (packages_app.audit.check)."""

    schema_: int | None = Field(alias="schema")
    valid: bool
    passes: bool = Field(
        description="What `manage.py check_manifest` exits 0 on: valid, admitted by the newest release, "
        "not refused split by a known roster, no error finding. The same for the same bytes on every surface."
    )
    assessment: AssessmentOut
    problems: list[CheckProblemOut]
    package_id: PackageIdOut
    runtime: dict[str, ResolutionOut] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.outcomes)"
    )
    compatibility: list[AdmissionOut] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.servable)"
    )
