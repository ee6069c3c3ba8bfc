"""Who may act: public reading, operator permissions, tracking limits, login throttling, the action log.

An edge helper for views, the admin and the URL conf; selectors and services never import it.

Reading is public unless ``MESHDASH_PUBLIC_READ`` is false. Acting (track, untrack, delete, re-ingest,
node management) needs a signed-in user with the model permission; the "operators" group (created by
migration 0006) holds them all. Login throttling uses Django's own tools, not django-axes: a failure
counter per username and per client address in the shared cache (the one the node rate limiter uses),
checked by the login form before it asks the password backend. It needs no new tables, middleware or
backend, and the cache is already shared by every web worker; django-axes would add all three for the
same lock-out rule.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render

from packages_app.models import ActionLog
from packages_app.web import ratelimit

log = logging.getLogger(__name__)

View = Callable[..., HttpResponse]
# request.user: a User (with has_perm, is_superuser) or AnonymousUser; the stubs type it more loosely.
User = Any

TRACK_WINDOW = 3600
VIEW_PRIVATE = "packages_app.view_private_package"


# --- reading ---------------------------------------------------------------------------------------


class LoginRequiredUnlessPublicMiddleware(LoginRequiredMiddleware):
    """Django's LoginRequiredMiddleware, switched on by ``MESHDASH_PUBLIC_READ=false``.

    The node API (reports, ping, webhook) authenticates on its own and is marked ``login_not_required``;
    the read API answers 401 JSON instead of a redirect to the login page.
    """

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: Any,
        view_kwargs: Any,
    ) -> HttpResponseBase | None:
        if settings.MESHDASH_PUBLIC_READ:
            return None
        open_view = not getattr(view_func, "login_required", True)
        if request.path.startswith("/api/") and not (open_view or request.user.is_authenticated):
            return JsonResponse({"error": "Sign in first: this dashboard is not public."}, status=401)
        return super().process_view(request, view_func, view_args, view_kwargs)


def can_see_private(user: User) -> bool:
    return bool(user.is_authenticated and user.has_perm(VIEW_PRIVATE))


# --- acting ----------------------------------------------------------------------------------------


def permission_required(perm: str) -> Callable[[View], View]:
    """Anonymous: to the login page. Signed in without ``perm``: a 403 page that says what is missing."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
            if not request.user.has_perm(perm):
                return forbidden(request, f"Your account may not do this (it needs the {perm} permission).")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def forbidden(request: HttpRequest, message: str) -> HttpResponse:
    context = {"title": "Not allowed", "message": message}
    return render(request, "packages_app/error.html", context, status=403)


def namespace_refusal(user: User, repo_id: str) -> str | None:
    """Why this user may not track ``repo_id``'s namespace, or None. Superusers may track any."""
    allowed = settings.MESHDASH_TRACK_NAMESPACES
    namespace = repo_id.split("/", 1)[0]
    if getattr(user, "is_superuser", False) or namespace in allowed:
        return None
    return f"Only packages of {', '.join(allowed) or 'no namespace'} may be tracked here, not {namespace}/."


def propose_rate_refusal(user: User) -> str | None:
    """Count one fix pull request request; a sentence when over ``MESHDASH_PROPOSE_RATE_LIMIT`` per hour."""
    limit = settings.MESHDASH_PROPOSE_RATE_LIMIT
    minutes = _hourly_wait(f"meshdash:propose-rate:{user.pk}", limit)
    if minutes is None:
        return None
    return f"You asked for {limit} pull requests this hour, the most allowed; try again in {minutes} minutes."


def track_rate_refusal(user: User) -> str | None:
    """Count one track for this user; a sentence when over ``MESHDASH_TRACK_RATE_LIMIT`` per hour."""
    limit = settings.MESHDASH_TRACK_RATE_LIMIT
    minutes = _hourly_wait(f"meshdash:track-rate:{user.pk}", limit)
    if minutes is None:
        return None
    return f"You tracked {limit} packages this hour, the most allowed; try again in {minutes} minutes."


def sync_rate_refusal(user: User) -> str | None:
    """Count one "Sync from the Hub"; a sentence when over ``MESHDASH_SYNC_RATE_LIMIT`` per hour."""
    limit = settings.MESHDASH_SYNC_RATE_LIMIT
    minutes = _hourly_wait(f"meshdash:sync-rate:{user.pk}", limit)
    if minutes is None:
        return None
    return f"You synced {limit} times this hour, the most allowed; try again in {minutes} minutes."


def _hourly_wait(key: str, limit: int) -> int | None:
    """Count one hit on ``key`` this hour: None while within ``limit`` (0 or less: no limit), else the
    minutes until the hour's window ends."""
    if limit <= 0:
        return None
    window = int(time.time()) // TRACK_WINDOW
    if ratelimit.count_hit(f"{key}:{window}", TRACK_WINDOW * 2) <= limit:
        return None
    return (TRACK_WINDOW - int(time.time()) % TRACK_WINDOW) // 60 + 1


def record(user: User, action: str, target: str, detail: str = "") -> ActionLog:
    """One line of the action log; the username is kept as text so it outlives the account."""
    entry = ActionLog.objects.create(
        user=user if user.is_authenticated else None,
        username=user.get_username() if user.is_authenticated else "(anonymous)",
        action=action,
        target=target[:200],
        detail=detail[:500],
    )
    log.info("%s: %s %s %s", entry.username, action, target, detail)
    return entry


# --- logging in ------------------------------------------------------------------------------------


def client_address(request: HttpRequest) -> str:
    """REMOTE_ADDR, or the client behind a trusted proxy (ratelimit.client_address)."""
    return ratelimit.client_address(request)


def login_name(username: str) -> str:
    """The name a failure counts against: what the user model would look up (Django's NFKC
    normalisation: full-width or mathematical-bold letters spelling root are ``root``), case-folded
    (a case-insensitive backend cannot be guessed past either; the default one only locks more)."""
    return get_user_model().normalize_username(username).strip().casefold()


def _failure_keys(request: HttpRequest, username: str) -> list[str]:
    name = hashlib.sha256(login_name(username).encode()).hexdigest()[:32]
    return [f"meshdash:login-fail:user:{name}", f"meshdash:login-fail:addr:{client_address(request)}"]


class ThrottledLoginMixin:
    """Refuse after MESHDASH_LOGIN_FAILURE_LIMIT failures per normalised username or client address,
    before the password backend is asked; count each failure. Mixed into every login form: the site's
    and the admin's (admin.site.login_form), so no login path escapes the count."""

    request: HttpRequest | None
    data: Any

    def clean(self) -> dict[str, Any]:
        assert self.request is not None
        keys = _failure_keys(self.request, str(self.data.get("username", "")))
        limit = settings.MESHDASH_LOGIN_FAILURE_LIMIT
        if limit <= 0:
            return super().clean()  # type: ignore[misc, no-any-return]
        # Counted first, then checked: each attempt takes its place in the count (one atomic increment)
        # before the password is asked, so parallel guesses cannot all pass a check none of them has been
        # counted in yet (issue 48: 30 parallel guesses got 7 password checks against a limit of 5).
        counts = [ratelimit.count_hit(key, settings.MESHDASH_LOGIN_LOCKOUT) for key in keys]
        if any(count > limit for count in counts):
            minutes = settings.MESHDASH_LOGIN_LOCKOUT // 60
            raise ValidationError(
                f"Too many failed sign-ins for this account or address; try again in {minutes} minutes.",
                code="throttled",
            )
        cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]  # a failure stays counted
        for key in keys:  # signed in: this attempt was no failure
            with contextlib.suppress(ValueError):
                cache.decr(key)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    """The site's login form (/accounts/login/), throttled."""


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """The admin's login form (staff only), throttled by the same counters."""
