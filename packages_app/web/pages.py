"""Browser views: thin; they validate the request, call selectors in queries.py and render templates."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from packages_app import (
    background,
    baselines,
    certify_reports,
    fixes,
    queries,
    queueing,
    repo_ids,
    report_time,
    staticfinders,
)
from packages_app.audit.assessment import Assessment
from packages_app.audit.check import ManifestCheck
from packages_app.audit.model import UNCERTAIN as RESOLVER_UNCERTAIN
from packages_app.audit.model import Suggestion
from packages_app.audit.release_tables import release_tables, shared_outcomes
from packages_app.charts.layers import layer_layout_figure, stage_boundaries
from packages_app.charts.timelines import mtp_comparison_figure, strategy_figure, throughput_timeline_figure
from packages_app.fleet.compare import default_comparison_pair
from packages_app.fleet.plans import plan_advice
from packages_app.layout import METADATA_CARRIER, FileRole
from packages_app.models import ActionLog, Package, Revision
from packages_app.throughput import RevisionThroughput, revision_throughput
from packages_app.verdicts import STATUSES_BY_RANK, VERDICTS_BY_RANK, ActionKind, Cause
from packages_app.web import access, check_budget, ratelimit
from packages_app.web.forms import (
    SORTS,
    TIME_RANGE_LABELS,
    CatalogFilterForm,
    CheckManifestForm,
    TimeRangeForm,
    TrackPackageForm,
)

log = logging.getLogger(__name__)

View = Callable[..., HttpResponse]


def lookup_errors(view: View) -> View:
    """Turn a missing package/revision/file into a 404 page and an ambiguous sha into a 400."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except queries.LookupFailed as exc:
            return _error_page(request, "Not found", str(exc), 404, exc.back)
        except queries.AmbiguousRevision as exc:
            return _error_page(request, "Ambiguous revision", str(exc), 400)

    return wrapper


def _error_page(
    request: HttpRequest, title: str, message: str, status: int, back: str = "catalog"
) -> HttpResponse:
    context = {"title": title, "message": message, "back": back}
    return render(request, "packages_app/error.html", context, status=status)


# --- catalog -------------------------------------------------------------------------------------


@require_safe
def catalog(request: HttpRequest) -> HttpResponse:
    form = valid_catalog_form(request)
    result = queries.catalog_page(
        form.filters(),
        form.page_number(),
        form.page_size(),
        show_private=access.can_see_private(request.user),
    )
    context = {
        "form": form,
        "result": result,
        "filters": form.filters(),
        "sorts": SORTS,
        "statuses": STATUSES_BY_RANK,
        "verdicts": VERDICTS_BY_RANK,
    }
    return render(request, "packages_app/catalog.html", context)


def valid_catalog_form(request: HttpRequest) -> CatalogFilterForm:
    """The filters; an invalid or stale value falls back to its default, with a message saying so."""
    form = CatalogFilterForm(request.GET)
    if form.is_valid():
        return form
    for sentence in form.error_sentences():
        messages.warning(request, f"Ignored {sentence.rstrip('.')}; showing the default instead.")
    fallback = form.with_defaults_for_errors()
    fallback.is_valid()
    return fallback


# --- check a manifest ---------------------------------------------------------------------------

_UPLOAD_SLACK = 64 * 1024  # multipart boundaries and the CSRF field around a 16 MiB file


@require_http_methods(["GET", "POST"])
def check_manifest_page(request: HttpRequest) -> HttpResponse:
    """Paste or upload a model-package.json; see it judged as mesh-llm judges it. No login."""
    if request.method == "GET":
        return _check_page(request, CheckManifestForm())
    signed_in = bool(request.user.is_authenticated)
    cap = check_budget.size_limit(signed_in)
    if _content_length(request) > cap + _UPLOAD_SLACK:
        check_budget.drain(request, _content_length(request))
        too_big = check_budget.too_big_message(cap, signed_in)
        return _check_page(request, CheckManifestForm(), [too_big], 413)
    wait = ratelimit.retry_after(ratelimit.client_key(request, "check"), settings.MESHDASH_CHECK_RATE_LIMIT)
    if wait is not None:
        response = _check_page(
            request, CheckManifestForm(), [f"Too many checks; try again in {wait} s."], 429
        )
        response["Retry-After"] = str(wait)
        return response
    try:
        # Reserved on the declared length, before the form reads the body: a refusal costs little.
        with check_budget.reserve(min(_content_length(request), cap)):
            return _checked_page(request, cap)
    except check_budget.Busy as busy:
        response = _check_page(request, CheckManifestForm(), [busy.message()], 503)
        response["Retry-After"] = str(busy.retry_after)
        return response


def _checked_page(request: HttpRequest, cap: int) -> HttpResponse:
    try:
        form = CheckManifestForm(request.POST, request.FILES, max_bytes=cap)
        valid = form.is_valid()
    except RequestDataTooBig:
        too_big = "A pasted manifest may be at most 2.5 MiB; upload the file instead (up to 16 MiB)."
        return _check_page(request, CheckManifestForm(), [too_big], 413)
    if not valid:
        return _check_page(request, form, form.error_sentences(), 400)
    result, tracked = queries.judge_manifest(form.manifest_bytes(), access.can_see_private(request.user))
    return _check_page(request, form, result=result, tracked=tracked)


def _check_page(
    request: HttpRequest,
    form: CheckManifestForm,
    errors: list[str] | None = None,
    status: int = 200,
    result: ManifestCheck | None = None,
    tracked: Revision | None = None,
) -> HttpResponse:
    context = {
        "form": form,
        "errors": errors or [],
        "result": result,
        "tracked": tracked,
        "release_tables": (tables := release_tables(result.assessment) if result else []),
        "release_shared": shared_outcomes(tables),
        "runtime_notes": RESOLVER_UNCERTAIN,
        "upload_limit": check_budget.upload_limit_text(bool(request.user.is_authenticated)),
    }
    return render(request, "packages_app/check.html", context, status=status)


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


# --- one package ---------------------------------------------------------------------------------


@require_safe
@lookup_errors
def package_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    revision = queries.resolve_revision(package, request.GET.get("revision"))
    history = queries.revision_history(package)
    context: dict[str, Any] = {"package": package, "revision": revision, "history": history}
    if revision is not None:
        range_form = TimeRangeForm(request.GET)
        time_range, since, until = range_form.window(timezone.now())
        context.update(_revision_context(revision, since, until, history))
        context["time_range"] = time_range
        context["time_ranges"] = TIME_RANGE_LABELS
        context["range_form"] = range_form
        if "files_page" in request.GET or request.GET.get("files") == "all":
            context["files"] = queries.revision_files(revision, _page_param(request.GET.get("files_page")))
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
    throughput = revision_throughput(revision.pk, since=since, until=until)
    revisions = history or [revision]
    # Where each revision of the package started being served: the timeline marks those on its axis.
    first = queries.first_served(revisions) if throughput else {}
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
        "node_notes": [p for p in plans if p.advice.cause in NODE_NOTES],
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
        "file_overview": (overview := queries.revision_file_overview(revision, detected.mtp_blocks)),
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
    fix = queries.fix_proposal_for(package)
    return {
        "fix": fix,
        "fix_pr_link": hub_pr_link(fix.pr_url if fix else ""),
        "fix_pr_v1": fixes.v1_refusal(revision) if suggested else None,
        "fix_pr_superseded": fixes.supersede_refusal(package, revision) if applies else None,
        "fix_pr_better": fixes.find_better_revision(package, revision) if applies else None,
        "fix_pr_offer": applies and revision.schema_version == 2,
        "fix_author": fixes.author_label(),
        "fix_token": bool(fixes.write_token()),
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
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    revision = queries.require_revision(package, request.GET.get("revision"))
    audited = revision.audited
    patched = audited.suggestion.patched_manifest if audited.suggestion else ""
    if not patched:
        reason = (
            "was too large to store" if audited.was_cut(_PATCHED_PATH) else "needs no fix, so there is none"
        )
        raise queries.LookupFailed(f"The patched manifest of {revision} {reason}.")
    filename = f"{package.name}-{revision.short_sha}-model-package.json"
    response = HttpResponse(patched, content_type="application/json")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


@require_safe
@lookup_errors
def file_detail(request: HttpRequest, owner: str, name: str, path: str) -> HttpResponse:
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    revision = queries.require_revision(package, request.GET.get("revision"))
    file = queries.get_file(revision, path)
    tensors = file.tensors if isinstance(file.tensors, list) else []
    context = {
        "package": package,
        "revision": revision,
        "file": file,
        "kv": queries.kv_rows(file.kv),
        "tensors": tensors[: queries.TENSOR_ROW_LIMIT],
        "tensor_count": len(tensors),
    }
    return render(request, "packages_app/file_detail.html", context)


@require_safe
@lookup_errors
def revision_diff(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Compare two revisions; ``to`` defaults to the latest, ``from`` to the one before ``to``."""
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    new = queries.require_revision(package, request.GET.get("to"))
    old_ref = request.GET.get("from")
    old = (
        queries.require_revision(package, old_ref)
        if old_ref
        else _previous_in(queries.revision_history(package), new)
    )
    if old is None:
        raise queries.LookupFailed(f"{new} is the oldest revision; there is nothing to compare it with.")
    context = {"package": package, "diff": queries.revision_diff(old, new)}
    return render(request, "packages_app/revision_diff.html", context)


# --- ingest and operator actions ------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def ingest_status(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _track_post(request)
    background.reconcile_soon()
    return _ingest_page(request, TrackPackageForm())


def _ingest_page(request: HttpRequest, form: TrackPackageForm, status: int = 200) -> HttpResponse:
    overview = queries.ingest_overview(
        show_private=access.can_see_private(request.user),
        # A repo id an operator typed may name a private repo: only those who may track see the requests.
        show_track_requests=request.user.has_perm("packages_app.track_package"),
    )
    context = {"form": form, "overview": overview}
    return render(request, "packages_app/ingest.html", context, status=status)


@access.permission_required("packages_app.track_package")
def _track_post(request: HttpRequest) -> HttpResponse:
    form = TrackPackageForm(request.POST)
    if not form.is_valid():
        return _ingest_page(request, form, status=400)
    repo_id = form.cleaned_data["repo_id"]
    refusal, status = access.namespace_refusal(request.user, repo_id), 400
    if refusal is None:  # counted only for a track that is otherwise allowed
        refusal, status = access.track_rate_refusal(request.user), 429
    if refusal is None:
        return _track(request, repo_id)
    form.add_error("repo_id", refusal)
    return _ingest_page(request, form, status=status)


def _track(request: HttpRequest, repo_id: str) -> HttpResponse:
    # Imported here: ingest.py pulls in the Hub client, which the read-only pages never need.
    from packages_app import queueing
    from packages_app.ingest import request_track

    try:
        background.ensure_room()
    except background.Busy as exc:
        messages.error(request, f"{repo_id} is not tracked: {exc}")
        return redirect("packages_app:ingest")
    # No catalog row yet: a worker asks the Hub whether the repo exists, and tracks it only then.
    request_track(repo_id)
    background.hand_off(queueing.enqueue_track, repo_id)
    access.record(request.user, ActionLog.Action.TRACK, repo_id)
    messages.success(
        request,
        f"Checking {repo_id} on the Hub: once it confirms the repo exists, it is tracked and its "
        "revisions are queued for ingest.",
    )
    return redirect("packages_app:ingest")


@require_POST
@access.permission_required("packages_app.change_package")
@lookup_errors
def package_untrack(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    Package.objects.filter(pk=package.pk).update(tracked=False)
    access.record(request.user, ActionLog.Action.UNTRACK, package.repo_id)
    messages.success(request, f"{package.repo_id} is no longer synced; what was ingested stays.")
    return redirect("packages_app:package", owner, name)


@require_http_methods(["GET", "POST"])
@access.permission_required("packages_app.delete_package")
@lookup_errors
def package_delete(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """GET: what would be deleted, with a confirm button; POST: delete it with its revisions and files."""
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    if request.method == "GET":
        context = {"package": package, "counts": queries.package_counts(package)}
        return render(request, "packages_app/package_delete.html", context)
    counts = queries.package_counts(package)
    package.delete()
    detail = f"{counts['revisions']} revisions, {counts['files']} files"
    access.record(request.user, ActionLog.Action.DELETE, package.repo_id, detail)
    messages.success(request, f"Deleted {package.repo_id} ({detail}).")
    return redirect("packages_app:catalog")


@require_POST
@access.permission_required("packages_app.reingest_package")
@lookup_errors
def package_reingest(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    shas = list(
        package.revisions.exclude(status=Revision.Status.RUNNING).values_list("commit_sha", flat=True)
    )
    queued = f"{len(shas)} revisions of {package.repo_id} are queued for ingest again"
    try:
        with transaction.atomic():  # queued first: the work starts only once this commits
            # queued_at: their wait starts now (a re-queued revision kept its first one, issue 48)
            package.revisions.filter(commit_sha__in=shas).update(
                status=Revision.Status.QUEUED, queued_at=timezone.now()
            )
            queueing.enqueue_reingest(package.repo_id, shas)
    except background.Busy as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    except queueing.BROKER_DOWN as exc:  # committed: the revisions are queued, the reconciler sends them
        log.warning("reingest of %s: the task queue is unavailable: %s", package.repo_id, exc)
        messages.warning(
            request,
            f"{queued}; the task queue is unavailable right now, so they start once it is back "
            "(the reconciler sends queued revisions).",
        )
    else:
        messages.success(request, f"{queued}.")
    access.record(request.user, ActionLog.Action.REINGEST, package.repo_id, f"{len(shas)} revisions")
    return redirect("packages_app:package", owner, name)


@require_POST
@access.permission_required("packages_app.reingest_package")
@lookup_errors
def package_sync(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Read the Hub now: new commits (and so their ingest) and the states of meshdash's pull requests."""
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    refusal = access.sync_rate_refusal(request.user)
    if refusal:
        messages.error(request, refusal)
        return redirect("packages_app:package", owner, name)
    proposals = fixes.followed_proposals(package.fix_proposals.all())
    try:
        background.hand_off(queueing.enqueue_sync_now, package.repo_id, proposals)
    except background.Busy as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    access.record(request.user, ActionLog.Action.SYNC, package.repo_id, f"{len(proposals)} pull requests")
    messages.success(
        request,
        f"Syncing {package.repo_id} from the Hub: new commits are ingested and the pull requests' states "
        "read back; reload in a few seconds.",
    )
    return redirect("packages_app:package", owner, name)


# --- a pull request with the patched manifest ----------------------------------------------------------


@require_http_methods(["GET", "POST"])
@access.permission_required("packages_app.propose_fix")
@lookup_errors
def package_propose_fix(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """GET: what the PR would carry (diff, title, description, author); POST: record it, a worker sends it."""
    package = queries.get_package(owner, name, access.can_see_private(request.user))
    ref = request.POST.get("revision") if request.method == "POST" else request.GET.get("revision")
    revision = queries.resolve_revision(package, ref)
    if revision is None:
        raise queries.LookupFailed(f"{package.repo_id} has no ingested revision yet.")
    existing = fixes.active_proposal(package, revision.commit_sha)
    link = hub_pr_link(existing.pr_url if existing else "")
    context: dict[str, Any] = {
        "package": package,
        "revision": revision,
        "existing": existing,
        "existing_link": link,
    }
    if existing is None:
        try:
            context["plan"] = fixes.plan(package, revision)
        except fixes.FixRefused as exc:
            context["refusal"] = str(exc)
    context |= {"author": fixes.author_label(), "token": bool(fixes.write_token())}
    if request.method == "POST" and existing is not None:
        messages.info(request, f"A pull request for this revision is already proposed: {existing.summary}.")
        return redirect("packages_app:package", owner, name)
    if request.method == "GET" or "refusal" in context:
        status = 409 if request.method == "POST" else 200
        return render(request, "packages_app/propose_fix.html", context, status=status)
    refusal = access.propose_rate_refusal(request.user)
    if refusal:
        messages.error(request, refusal)
        return redirect("packages_app:package", owner, name)
    try:
        with transaction.atomic():
            proposal, created = fixes.request_fix(package, revision, request.user)
            if created:
                background.hand_off(queueing.enqueue_open_fix, proposal.pk)
    except fixes.FixRefused as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    except background.Busy as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    if created:
        detail = f"{revision.short_sha}: {proposal.promised_headline} promised"
        access.record(request.user, ActionLog.Action.PROPOSE_FIX, package.repo_id, detail)
        messages.success(request, f"The pull request for {revision.short_sha} is being opened on the Hub.")
    else:
        messages.info(request, f"A pull request for this revision is already proposed: {proposal.summary}.")
    return redirect(
        f"{reverse('packages_app:package', args=[owner, name])}?revision={revision.commit_sha}#fix"
    )
