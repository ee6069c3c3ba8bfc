"""The package page and its revision pages: a package's headline, fix, audit, throughput, files and
history; one file's header, the diff of two revisions, the patched manifest as a download.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_safe

from packages_app import (
    baselines,
    certify_reports,
    fix_plans,
    fix_proposals,
    repo_ids,
    report_time,
    staticfinders,
)
from packages_app.audit.assessment import Assessment
from packages_app.audit.model import UNCERTAIN as RESOLVER_UNCERTAIN
from packages_app.audit.model import Suggestion
from packages_app.audit.release_tables import release_tables, shared_outcomes
from packages_app.catalog import diff as catalog_diff
from packages_app.catalog.errors import LookupFailed
from packages_app.catalog.files import (
    TENSOR_ROW_LIMIT,
    get_file,
    kv_rows,
    revision_file_overview,
    revision_files,
)
from packages_app.catalog.lookups import (
    first_served,
    fix_proposal_for,
    get_package,
    require_revision,
    resolve_revision,
    revision_history,
)
from packages_app.charts.layers import layer_layout_figure, stage_boundaries
from packages_app.charts.timelines import mtp_comparison_figure, strategy_figure, throughput_timeline_figure
from packages_app.fleet.compare import default_comparison_pair
from packages_app.fleet.plans import node_notes, plan_advice
from packages_app.layout import METADATA_CARRIER, FileRole
from packages_app.models import Package, Revision
from packages_app.throughput import RevisionThroughput, revision_throughput
from packages_app.verdicts import ActionKind, Cause
from packages_app.web import access
from packages_app.web.forms import TIME_RANGE_LABELS, TimeRangeForm
from packages_app.web.pages import lookup_errors


@require_safe
@lookup_errors
def package_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    ref = request.GET.get("revision")
    package = get_package(owner, name, access.can_see_private(request.user), with_latest=not ref)
    revision = resolve_revision(package, ref)
    history = revision_history(package)
    context: dict[str, Any] = {"package": package, "revision": revision, "history": history}
    if revision is not None:
        range_form = TimeRangeForm(request.GET)
        time_range, since, until = range_form.window(timezone.now())
        context.update(_revision_context(revision, since, until, history))
        context["time_range"] = time_range
        context["time_ranges"] = TIME_RANGE_LABELS
        context["range_form"] = range_form
        if "files_page" in request.GET or request.GET.get("files") == "all":
            context["files"] = revision_files(revision, _page_param(request.GET.get("files_page")))
        pair = default_comparison_pair(history, revision.pk)
        context["previous"] = next((r for r in history if pair and r.pk == pair[0]), None)
        context.update(_fix_context(package, revision, context["assessment"], context["suggested"]))
        context["speedups"] = baselines.speedups(package, revision)
    context["hub_url"] = hub_url(package, revision)
    context["base_model_url"] = source_model_url(package.base_model)
    context["plotly_guard_ids"] = staticfinders.installed_plotly_guard_ids()
    return render(request, "packages_app/package_detail.html", context)


def source_model_url(base_model: str) -> str:
    """The Hub page of the source model a card names, when it names a repo id ("" otherwise: the card is
    untrusted text, shown as text)."""
    try:
        repo_id = repo_ids.validate_repo_id(base_model)
    except repo_ids.InvalidRepoId:
        return ""
    return f"{settings.HF_ENDPOINT.rstrip('/')}/{repo_id}"


def hub_url(package: Package, revision: Revision | None, path: str = "") -> str:
    """The package on the Hub pinned to the revision's sha: ``/tree/<sha>``, or ``/blob/<sha>/<path>``."""
    base = f"{settings.HF_ENDPOINT.rstrip('/')}/{package.repo_id}"
    if revision is None:
        return base
    return (
        f"{base}/blob/{revision.commit_sha}/{path.lstrip('/')}"
        if path
        else f"{base}/tree/{revision.commit_sha}"
    )


def _page_param(value: str | None) -> int:
    return int(value) if value and value.isdigit() and len(value) < 9 else 1


def _revision_context(
    revision: Revision,
    since: datetime | None = None,
    until: datetime | None = None,
    history: list[Revision] | None = None,
) -> dict[str, Any]:
    throughput = revision_throughput(
        revision.pk, since=since, until=until, mtp_detected=revision.mtp_detected
    )
    revisions = history or [revision]
    # Where each revision of the package started being served: the timeline marks those on its axis.
    first = first_served(revisions) if throughput else {}
    served = [(r.short_sha, first[r.pk]) for r in revisions if r.pk in first]
    splits = throughput.stage_splits if throughput else []
    audited = revision.audited
    suggested, detected = audited.suggestion, audited.detected
    assessment = Assessment.from_json(revision.assessment)
    plans = plan_advice(revision.pk, assessment, throughput.plans) if throughput else []
    return {
        "assessment": assessment,
        "status": assessment.status if assessment else revision.headline_status,
        "release_tables": (tables := release_tables(assessment) if assessment else []),
        "release_shared": shared_outcomes(tables),
        "plans": plans,
        "node_notes": node_notes(plans, NODE_NOTES),
        "hub_base": hub_url(revision.package, revision, path="/"),
        "problems": audited.problems_by_severity(),
        "truncated": audited.truncated,
        "detected": detected,
        "declared": audited.declared,
        "runtime_notes": RESOLVER_UNCERTAIN,
        "provenance": audited.provenance,
        "request_defaults": audited.request_defaults,
        "suggested": suggested,
        "suggested_json": _pretty_json(suggested.generation) if suggested else "",
        "file_overview": (overview := revision_file_overview(revision, detected.mtp_blocks)),
        "metadata_path": metadata_path(overview.items),
        "throughput": throughput,
        "skew_minutes": int(report_time.CLOCK_SKEW_LIMIT.total_seconds() // 60),
        "replay_days": report_time.REPLAY_WINDOW.days,
        "layout_chart": layer_layout_figure(
            detected.blocks,
            splits,
            detected.missing_nextn_tensors,
        ),
        "throughput_charts": _throughput_charts(throughput, served),
        "stage_boundaries": stage_boundaries(splits),
        "certify_reports": certify_reports.revision_certify_reports(revision),
    }


def _fix_context(
    package: Package, revision: Revision, assessment: Any, suggested: Suggestion | None
) -> dict[str, Any]:
    """The pull request part of the fix section: what was proposed, and whether one may be."""
    applies = assessment is not None and assessment.headline.action.kind == ActionKind.APPLY_PATCH
    better = fix_plans.find_better_revision(package, revision) if applies else None
    fix = fix_proposal_for(package)
    return {
        "fix": fix,
        "fix_pr_link": hub_pr_link(fix.pr_url if fix else ""),
        "fix_pr_v1": fix_plans.v1_refusal(revision) if suggested else None,
        "fix_pr_superseded": fix_plans.superseded_by(package, revision, better) if applies else None,
        "fix_pr_better": better,
        "fix_pr_offer": applies and revision.schema_version == 2,
        "fix_author": fix_proposals.author_label(),
        "fix_token": bool(fix_proposals.write_token()),
    }


def hub_pr_link(url: str) -> str:
    """A stored PR URL, only when it is on the Hub endpoint's origin (the page calls it "on the Hub")."""
    endpoint, parts = urlsplit(settings.HF_ENDPOINT), urlsplit(url)
    same = (parts.scheme, parts.netloc) == (endpoint.scheme, endpoint.netloc) and parts.path.startswith("/")
    return url if url and same else ""


# What the package page's headline box lists of the nodes' plans: contradictions and the causes that
# concern the revision itself (the plans table lists every node).
NODE_NOTES = (
    Cause.CONTRADICTION,
    Cause.SERVED_BYTES,
    Cause.MTP_UNUSED,
    Cause.UNKNOWN_RELEASE,
    Cause.UNCERTIFIED,
)


def _throughput_charts(
    throughput: RevisionThroughput | None, served: list[tuple[str, datetime]] | None = None
) -> dict[str, Any]:
    if not throughput:
        return {}
    return {
        # vars, not asdict: the points' fields are plain values, and asdict deep-copies each one.
        "timeline": throughput_timeline_figure(
            [dict(vars(point)) for point in throughput.series], throughput.bucket, served or []
        ),
        "strategies": strategy_figure([asdict(row) for row in throughput.by_strategy]),
        "mtp": mtp_comparison_figure(asdict(throughput.mtp_on), asdict(throughput.mtp_off)),
    }


def metadata_path(rows: list[Any]) -> str:
    """The path of the v2 metadata carrier among the file rows: it describes the layer files whose
    headers were not read (``skipped``), so the files table names it for them. mesh-llm's own name
    (docs/domain.md section 1) when the rows do not hold it."""
    for row in rows:
        file = getattr(row, "file", None)
        if file is not None and file.role == FileRole.METADATA:
            return str(file.path)
    return METADATA_CARRIER


def _previous_in(history: list[Revision], revision: Revision) -> Revision | None:
    ids = [r.pk for r in history]
    if revision.pk not in ids:
        return None
    index = ids.index(revision.pk)
    return history[index + 1] if index + 1 < len(history) else None


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


_PATCHED_PATH = "suggested_generation.patched_manifest"


@require_safe
@lookup_errors
def patched_manifest(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """The manifest with the suggested ``generation`` applied, as a download."""
    package = get_package(owner, name, access.can_see_private(request.user))
    revision = require_revision(package, request.GET.get("revision"))
    audited = revision.audited
    patched = audited.suggestion.patched_manifest if audited.suggestion else ""
    if not patched:
        reason = (
            "was too large to store" if audited.was_cut(_PATCHED_PATH) else "needs no fix, so there is none"
        )
        raise LookupFailed(f"The patched manifest of {revision} {reason}.")
    filename = f"{package.name}-{revision.short_sha}-model-package.json"
    response = HttpResponse(patched, content_type="application/json")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


@require_safe
@lookup_errors
def file_detail(request: HttpRequest, owner: str, name: str, path: str) -> HttpResponse:
    package = get_package(owner, name, access.can_see_private(request.user))
    revision = require_revision(package, request.GET.get("revision"))
    file = get_file(revision, path)
    tensors = file.tensors if isinstance(file.tensors, list) else []
    context = {
        "package": package,
        "revision": revision,
        "file": file,
        "kv": kv_rows(file.kv),
        "tensors": tensors[:TENSOR_ROW_LIMIT],
        "tensor_count": len(tensors),
    }
    return render(request, "packages_app/file_detail.html", context)


@require_safe
@lookup_errors
def revision_diff(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Compare two revisions; ``to`` defaults to the latest, ``from`` to the one before ``to``."""
    package = get_package(owner, name, access.can_see_private(request.user))
    new = require_revision(package, request.GET.get("to"))
    old_ref = request.GET.get("from")
    old = require_revision(package, old_ref) if old_ref else _previous_in(revision_history(package), new)
    if old is None:
        raise LookupFailed(f"{new} is the oldest revision; there is nothing to compare it with.")
    context = {"package": package, "diff": catalog_diff.revision_diff(old, new)}
    return render(request, "packages_app/revision_diff.html", context)
