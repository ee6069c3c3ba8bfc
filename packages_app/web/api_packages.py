"""The read-only JSON API of packages: ``GET /api/v1/packages`` (the catalog) and
``GET /api/v1/packages/<owner>/<name>`` (a revision's assessment and the audit behind it).

Same filters and selectors as the HTML catalog; every error is ``{"error": "<one sentence>"}``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.paginator import EmptyPage
from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from packages_app import certify_reports, verdicts
from packages_app.audit.assessment import Assessment
from packages_app.catalog.listing import CatalogRow, catalog_page
from packages_app.catalog.lookups import get_package, resolve_revision, revision_history
from packages_app.fleet.plans import PlanAdvice, plan_advice
from packages_app.fleet.served import ServedRevision
from packages_app.models import Package, Revision
from packages_app.node_plans import NodePlan
from packages_app.throughput import RevisionThroughput, revision_throughput
from packages_app.web import access
from packages_app.web.api_read import advice_json, error, read_only
from packages_app.web.forms import CatalogFilterForm


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
        result = catalog_page(
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


def _catalog_row_json(row: CatalogRow) -> dict[str, Any]:
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
    ref = request.GET.get("revision")
    package = get_package(owner, name, access.can_see_private(request.user), with_latest=not ref)
    revision = resolve_revision(package, ref)
    history = revision_history(package)
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
    throughput = revision_throughput(revision.pk, page=False, mtp_detected=revision.mtp_detected)
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


def _plan_json(plan: NodePlan) -> dict[str, Any]:
    return {**vars(plan), "last_seen": plan.last_seen.isoformat() if plan.last_seen else None}
