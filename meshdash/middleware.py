"""Project-wide HTTP middleware: the Content-Security-Policy header; 503, not 500, when the database or Redis
(the cache the rate limits and the login throttle count in, and the task queue) is down; 400, not 500, for an
address holding a NUL character."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from packages_app.queueing import BROKER_DOWN

log = logging.getLogger(__name__)

GetResponse = Callable[[HttpRequest], HttpResponse]

UNAVAILABLE_MESSAGE = "The database is unavailable; try again shortly."
REDIS_UNAVAILABLE_MESSAGE = (
    "The cache and task queue (Redis) are unavailable, so this cannot be counted or queued now; "
    "try again shortly."
)
_UNAVAILABLE_PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>Unavailable · meshdash</title></head>"
    "<body><h1>Temporarily unavailable</h1><p>{message}</p></body></html>"
)


class ContentSecurityPolicyMiddleware:
    """Send ``settings.MESHDASH_CONTENT_SECURITY_POLICY`` with every response that has none yet."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.policy: str = settings.MESHDASH_CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.policy)
        return response


class DatabaseUnavailableMiddleware:
    """A view that cannot reach the database answers 503 + Retry-After: JSON under /api/, else a short page.

    OperationalError and InterfaceError are what the driver raises when the server is down, restarting
    or unreachable; other database errors (integrity, data) are bugs or bad input and stay 500/400.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, BROKER_DOWN):
            log.warning("Redis unavailable during %s %s: %s", request.method, request.path, exception)
            return unavailable_response(request, REDIS_UNAVAILABLE_MESSAGE)
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        log.warning("database unavailable during %s %s: %s", request.method, request.path, exception)
        return unavailable_response(request)


def unavailable_response(request: HttpRequest, message: str = UNAVAILABLE_MESSAGE) -> HttpResponse:
    retry_after = str(settings.MESHDASH_DB_RETRY_AFTER)
    response: HttpResponse
    if request.path.startswith("/api/") or request.path.startswith("/v1/"):
        response = JsonResponse({"error": message}, status=503)
    else:
        response = HttpResponse(_UNAVAILABLE_PAGE.format(message=message), status=503)
    response["Retry-After"] = retry_after
    response["Cache-Control"] = "no-store"
    return response


NUL_MESSAGE = "The address holds a NUL character (%00), which no package, node, topology or parameter can."
_BAD_REQUEST_PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>Bad request · meshdash</title></head>"
    "<body><h1>Bad request</h1><p>{message}</p></body></html>"
)


class NulInAddressMiddleware:
    """400, not 500, for an address whose path or query string holds a NUL character: PostgreSQL refuses
    one in a text parameter (``DataError``), so a lookup of such a repo, node, topology or file name failed
    the request; no name or parameter here can hold one. JSON under /api/, else a short page."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or _nul_in(request.GET):
            response: HttpResponse
            if request.path.startswith("/api/") or request.path.startswith("/v1/"):
                response = JsonResponse({"error": NUL_MESSAGE}, status=400)
            else:
                response = HttpResponse(_BAD_REQUEST_PAGE.format(message=NUL_MESSAGE), status=400)
            response["Cache-Control"] = "no-store"
            return response
        return self.get_response(request)


def _nul_in(params: Any) -> bool:
    return any("\x00" in key or any("\x00" in value for value in params.getlist(key)) for key in params)
