"""The /check/ page: paste or upload a model-package.json and see it judged as mesh-llm judges it, no login;
its size, rate and site-wide budget of checks in flight (check_budget).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from packages_app import queries
from packages_app.audit.check import ManifestCheck
from packages_app.audit.model import UNCERTAIN as RESOLVER_UNCERTAIN
from packages_app.audit.release_tables import release_tables, shared_outcomes
from packages_app.models import Revision
from packages_app.web import access, check_budget, ratelimit
from packages_app.web.forms import CheckManifestForm

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
