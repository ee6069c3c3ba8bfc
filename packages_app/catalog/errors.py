"""What a page's lookup raises when the request names nothing, or too much: the edges answer 404 and 400."""

from __future__ import annotations


class LookupFailed(Exception):
    """A package, revision or file the request named does not exist (HTTP 404). ``back`` names the list
    the error page leads back to: ``catalog`` or ``nodes``."""

    def __init__(self, message: str, back: str = "catalog") -> None:
        super().__init__(message)
        self.back = back


class AmbiguousRevision(Exception):
    """A sha prefix matches more than one revision (HTTP 400)."""
