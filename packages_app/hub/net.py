"""Outbound HTTP for the Hub and for plain URLs: one ranged GET through huggingface_hub's session.

The only place besides ``client.py`` that does network I/O; imports nothing from Django.
"""

from __future__ import annotations

from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, but not re-exported for mypy
    hf_raise_for_status,
    http_backoff,
)

from packages_app.hub.errors import EXPECTED_ERRORS, RETRY_STATUS, translate


def ranged_get(
    url: str, start: int, length: int, *, headers: dict[str, str], what: str, max_retries: int = 4
) -> bytes:
    """One ranged GET through huggingface_hub's session, retried on 429/5xx honouring Retry-After."""
    if length <= 0:
        return b""
    try:
        response = http_backoff(
            "GET",
            url,
            headers={**headers, "Range": f"bytes={start}-{start + length - 1}"},
            max_retries=max_retries,
            retry_on_status_codes=RETRY_STATUS,
        )
        if response.status_code == 416:  # asked past the end of the file
            return b""
        hf_raise_for_status(response)
    except EXPECTED_ERRORS as exc:
        raise translate(exc, what) from exc
    body: bytes = response.content
    if response.status_code == 200:  # the server ignored Range: keep only what was asked
        body = body[start : start + length]
    return body[:length]
