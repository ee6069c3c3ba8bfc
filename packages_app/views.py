"""Browser views: thin; they validate the request, call selectors in queries.py and render templates."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods

from packages_app import charts, fleet, queries, staticfinders
from packages_app.forms import SORTS, CatalogFilterForm, TrackPackageForm
from packages_app.models import Package, Revision

View = Callable[..., HttpResponse]


def lookup_errors(view: View) -> View:
    """Turn a missing package/revision/file into a 404 page and an ambiguous sha into a 400."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except queries.LookupFailed as exc:
            return _error_page(request, "Not found", str(exc), 404)
        except queries.AmbiguousRevision as exc:
            return _error_page(request, "Ambiguous revision", str(exc), 400)

    return wrapper


def _error_page(request: HttpRequest, title: str, message: str, status: int) -> HttpResponse:
    context = {"title": title, "message": message}
    return render(request, "packages_app/error.html", context, status=status)


# --- catalog -------------------------------------------------------------------------------------


@require_GET
def catalog(request: HttpRequest) -> HttpResponse:
    form = valid_catalog_form(request)
    result = queries.catalog_page(form.filters(), form.page_number(), form.page_size())
    context = {"form": form, "result": result, "filters": form.filters(), "sorts": SORTS}
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


# --- one package ---------------------------------------------------------------------------------


@require_GET
@lookup_errors
def package_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = queries.package_get(owner, name)
    revision = queries.revision_resolve(package, request.GET.get("revision"))
    history = queries.revision_history(package)
    context: dict[str, Any] = {"package": package, "revision": revision, "history": history}
    if revision is not None:
        context.update(_revision_context(revision))
        context["previous"] = _previous_in(history, revision)
    context["hub_url"] = hub_url(package, revision)
    context["plotly_guard_ids"] = staticfinders.installed_plotly_guard_ids()
    return render(request, "packages_app/package_detail.html", context)


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


def _revision_context(revision: Revision) -> dict[str, Any]:
    throughput = queries.revision_throughput_for(revision)
    splits = list(throughput.get("stage_splits") or []) if throughput else []
    suggested = queries.suggested_generation(revision)
    runtime = queries.audit_section(revision, "runtime")
    ran = fleet.ran_counts(revision.pk) if throughput else fleet.RanCounts()
    return {
        "findings": fleet.reconcile(fleet.auto_outcome(runtime, revision.verdict), ran),
        "hub_base": hub_url(revision.package, revision, path="/"),
        "problems": queries.audit_problems(revision),
        "detected": queries.audit_section(revision, "detected"),
        "declared": queries.audit_section(revision, "declared"),
        "runtime": runtime,
        "provenance": queries.audit_section(revision, "provenance"),
        "suggested": suggested,
        "suggested_json": _pretty_json(suggested.get("generation")) if suggested else "",
        "files": queries.revision_files(revision),
        "throughput": throughput,
        "layout_chart": charts.layer_layout_figure(
            queries.audit_blocks(revision),
            splits,
            queries.audit_section(revision, "detected").get("missing_nextn_tensors"),
        ),
        "throughput_charts": _throughput_charts(throughput),
        "stage_boundaries": charts.stage_boundaries(splits),
    }


def _throughput_charts(throughput: dict[str, Any] | None) -> dict[str, Any]:
    if not throughput:
        return {}
    return {
        "timeline": charts.throughput_timeline_figure(list(throughput.get("series") or [])),
        "strategies": charts.strategy_figure(list(throughput.get("by_strategy") or [])),
        "mtp": charts.mtp_comparison_figure(throughput.get("mtp_on"), throughput.get("mtp_off")),
    }


def _previous_in(history: list[Revision], revision: Revision) -> Revision | None:
    ids = [r.pk for r in history]
    if revision.pk not in ids:
        return None
    index = ids.index(revision.pk)
    return history[index + 1] if index + 1 < len(history) else None


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@require_GET
@lookup_errors
def patched_manifest(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """The manifest with the suggested ``generation`` applied, as a download."""
    package = queries.package_get(owner, name)
    revision = queries.revision_require(package, request.GET.get("revision"))
    suggested = queries.suggested_generation(revision)
    patched = suggested.get("patched_manifest") if suggested else None
    if not isinstance(patched, str):
        raise queries.LookupFailed(f"{revision} needs no fix, so there is no patched manifest.")
    filename = f"{package.name}-{revision.short_sha}-model-package.json"
    response = HttpResponse(patched, content_type="application/json")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


@require_GET
@lookup_errors
def file_detail(request: HttpRequest, owner: str, name: str, path: str) -> HttpResponse:
    package = queries.package_get(owner, name)
    revision = queries.revision_require(package, request.GET.get("revision"))
    file = queries.file_get(revision, path)
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


@require_GET
@lookup_errors
def revision_diff(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Compare two revisions; ``to`` defaults to the latest, ``from`` to the one before ``to``."""
    package = queries.package_get(owner, name)
    new = queries.revision_require(package, request.GET.get("to"))
    old_ref = request.GET.get("from")
    old = (
        queries.revision_require(package, old_ref)
        if old_ref
        else _previous_in(queries.revision_history(package), new)
    )
    if old is None:
        raise queries.LookupFailed(f"{new} is the oldest revision; there is nothing to compare it with.")
    context = {"package": package, "diff": queries.revision_diff(old, new)}
    return render(request, "packages_app/revision_diff.html", context)


# --- ingest --------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def ingest_status(request: HttpRequest) -> HttpResponse:
    form = TrackPackageForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        return _track(request, form.cleaned_data["repo_id"])
    context = {"form": form, "overview": queries.ingest_overview()}
    return render(request, "packages_app/ingest.html", context, status=400 if form.errors else 200)


def _track(request: HttpRequest, repo_id: str) -> HttpResponse:
    # Imported here: ingest.py pulls in the Hub client, which the read-only pages never need.
    from packages_app import queueing
    from packages_app.ingest import track_package

    package: Package = track_package(repo_id)
    queueing.enqueue_sync(package.repo_id)
    messages.success(request, f"Tracking {package.repo_id}: its revisions are queued for ingest.")
    return redirect("packages_app:ingest")
