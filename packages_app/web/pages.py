"""Browser views: thin; they validate the request, call the selectors in catalog/ and render templates.

This module holds what every page module shares (``lookup_errors``: a missing package, revision or file
as a 404 page) and the catalog; beside it ``package_pages`` (a package and its revisions),
``check_page`` (/check/), ``operator_pages`` (the ingest page and operators' actions) and
``fleet_pages`` (what the fleet runs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from packages_app.catalog.errors import AmbiguousRevision, LookupFailed
from packages_app.catalog.listing import catalog_page
from packages_app.verdicts import STATUSES_BY_RANK, VERDICTS_BY_RANK
from packages_app.web import access
from packages_app.web.forms import SORTS, CatalogFilterForm

View = Callable[..., HttpResponse]


def lookup_errors(view: View) -> View:
    """Turn a missing package/revision/file into a 404 page and an ambiguous sha into a 400."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except LookupFailed as exc:
            return _error_page(request, "Not found", str(exc), 404, exc.back)
        except AmbiguousRevision as exc:
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
    result = catalog_page(
        form.filters(),
        form.page_number(),
        form.page_size(),
        show_private=access.can_see_private(request.user),
    )
    context = {
        "form": form,
        "widgets": form.widgets(),
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
