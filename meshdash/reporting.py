"""What an error page or error e-mail may show: Django's safe filter, plus no password inside any URL.

Django hides settings whose *names* look secret (KEY, TOKEN, PASS, ...) but not a password inside a value:
``CACHE_URL=redis://:hunter2@cache:6379/0`` was shown whole on the DEBUG page, in settings and in the
request's environment (runserver copies the process environment into ``request.META``). Every string
setting, META value, frame variable and the exception's own message passes through ``redact_userinfo``.
"""

from __future__ import annotations

import re
from types import FrameType
from typing import Any

from django.http import HttpRequest
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

# scheme://user:password@host -> scheme://********@host (user names can be secrets too: tokens as users)
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
REDACTED = "********"


def redact_userinfo(value: str) -> str:
    return _USERINFO.sub(rf"\g<scheme>{REDACTED}@", value)


class UrlSecretsFilter(SafeExceptionReporterFilter):
    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        return redact_userinfo(cleansed) if isinstance(cleansed, str) else cleansed

    def get_traceback_frame_variables(self, request: HttpRequest | None, tb_frame: FrameType) -> Any:
        variables = super().get_traceback_frame_variables(request, tb_frame)
        return [(name, redact_userinfo(v) if isinstance(v, str) else v) for name, v in variables]


class UrlSecretsReporter(ExceptionReporter):
    """The exception's message and every frame's printed variables too: a driver error quotes its URL."""

    def get_traceback_data(self) -> dict[str, Any]:
        data: dict[str, Any] = super().get_traceback_data()
        if isinstance(data.get("exception_value"), str):
            data["exception_value"] = redact_userinfo(data["exception_value"])
        for frame in data.get("frames", []):
            # Variables arrive printed: an exception object or a dict holding a URL is text by now.
            frame["vars"] = [(name, _redact_any(value)) for name, value in frame.get("vars", [])]
        return data


def _redact_any(value: Any) -> Any:
    return redact_userinfo(value) if isinstance(value, str) else value
