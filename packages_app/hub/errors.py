"""What can go wrong talking to the Hub, as our own exception types, and which of those are worth a retry.

Only expected Hub and network failures are translated (HTTP errors, timeouts, connection failures);
anything else is a bug and propagates unchanged with its traceback. Imports nothing from Django.
"""

from __future__ import annotations

import httpx2
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from packages_app import repo_ids

RETRY_STATUS = (429, 500, 502, 503, 504)
# The network failures a retry can cure; a ValueError or a TypeError is a bug, not one of these.
NETWORK_ERRORS: tuple[type[Exception], ...] = (httpx2.RequestError, OfflineModeIsEnabled)
EXPECTED_ERRORS: tuple[type[Exception], ...] = (HfHubHTTPError, *NETWORK_ERRORS)


class HubError(Exception):
    """A Hub failure the caller can show as it is: one sentence naming the repo, revision or file."""

    retryable = False


class InvalidRepoId(HubError, repo_ids.InvalidRepoId):
    """A bad repo id, caught as a Hub error or as the pure rule's refusal alike."""


class HubNotFound(HubError):
    pass


class HubUnauthorized(HubError):
    pass


class HubRefused(HubError):
    """The answer broke one of our bounds (size, count, time, where a redirect points): not retried."""


class HubUnavailable(HubError):
    """429, 5xx or a network failure that outlived the client's own retries: try again later."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def translate(exc: Exception, what: str, *, max_retry_after: float = 600.0) -> HubError:
    """Map an expected huggingface_hub / network error onto ours, with a sentence naming what was asked for.

    Call it only with an instance of ``EXPECTED_ERRORS``; a caller catching anything wider hides bugs.
    """
    if isinstance(exc, GatedRepoError):
        return HubUnauthorized(
            f"{what}: the repo is gated; set HF_TOKEN to an account that was granted access"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubNotFound(f"{what}: repository not found (or private: set HF_TOKEN)")
    if isinstance(exc, RevisionNotFoundError):
        return HubNotFound(f"{what}: revision not found")
    if isinstance(exc, EntryNotFoundError):
        return HubNotFound(f"{what}: file not found")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return from_status(exc.response.status_code, exc.response.headers, what, max_retry_after)
    if isinstance(exc, httpx2.TimeoutException):
        return HubUnavailable(f"{what}: the Hub did not answer in time ({type(exc).__name__})")
    return HubUnavailable(f"{what}: {type(exc).__name__}: {exc}")


def from_status(status: int, headers: object, what: str, max_retry_after: float = 600.0) -> HubError:
    """The error for an HTTP status that is not a success."""
    if status in (401, 403):
        return HubUnauthorized(f"{what}: the Hub refused access ({status}); check HF_TOKEN")
    if status == 404:
        return HubNotFound(f"{what}: not found (404)")
    if status in RETRY_STATUS:
        wait = retry_after(headers, max_retry_after)
        return HubUnavailable(f"{what}: the Hub answered {status}", wait)
    return HubError(f"{what}: the Hub answered {status}")


def retry_after(headers: object, cap: float = 600.0) -> float | None:
    """Retry-After in seconds, never more than ``cap`` (a hostile 100000 s becomes the cap)."""
    value = getattr(headers, "get", lambda _k: None)("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None or seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), cap)
