"""The read-only JSON API's shared parts: GET only, lookup failures as JSON errors (every error is
``{"error": "<one sentence>"}``), and a node's advice as every surface gives it.

The resources are in ``api_packages`` (the catalog and a package) and ``api_nodes`` (a node); their
response shapes, for the OpenAPI document, in ``api_shapes``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, JsonResponse

from packages_app import queries
from packages_app.audit.advice import Advice

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
