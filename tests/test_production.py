"""Production defaults: DEBUG off unless set, serving refused without secrets, and no password from a
URL on any error page (with Django's own filter as the control that shows it leaking)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.views.debug import SafeExceptionReporterFilter

from meshdash.reporting import redact_userinfo
from meshdash.startup import FULL_EVERY
from packages_app.web import pages

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "hunter2-cache-password"
CACHE_URL = f"redis://:{PASSWORD}@cache.internal:6379/1"
_SETTINGS_ENV = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL")


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_ENV and k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=120
    )


def test_debug_is_off_when_nothing_is_set() -> None:
    result = python("import meshdash.settings as s; print(s.DEBUG, s.SECURE_SSL_REDIRECT)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_debug_is_on_only_when_explicitly_set() -> None:
    assert python("import meshdash.settings as s; print(s.DEBUG)", DEBUG="true").stdout.strip() == "True"


def test_the_web_refuses_to_start_without_a_secret_key_and_hosts() -> None:
    result = python("import meshdash.wsgi")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is false" in result.stderr
    assert "ALLOWED_HOSTS must be set when DEBUG is false" in result.stderr


def test_the_web_starts_with_them() -> None:
    result = python("import meshdash.wsgi", SECRET_KEY="x" * 60, ALLOWED_HOSTS="meshdash.example.org")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("entry", ["meshdash.wsgi", "meshdash.asgi"])
def test_the_web_keeps_its_start_up_objects_out_of_the_garbage_collectors_scans(entry: str) -> None:
    """Django set up, the serving process freezes what it made and spaces its full collections out
    (meshdash.startup); Django alone does neither."""
    production = {"SECRET_KEY": "x" * 60, "ALLOWED_HOSTS": "meshdash.example.org"}
    show = "print(gc.get_freeze_count(), *gc.get_threshold())"
    frozen = python(f"import gc, {entry}; {show}", **production)
    assert frozen.returncode == 0, frozen.stderr
    count, young, middle, full = map(int, frozen.stdout.split())
    assert count > 10_000 and full == FULL_EVERY
    alone = python(
        f"import gc, django; django.setup(); {show}", DJANGO_SETTINGS_MODULE="meshdash.settings", **production
    )
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.split() == ["0", str(young), str(middle), "10"]  # CPython's defaults


def test_offline_commands_need_no_production_settings(tmp_path: Path) -> None:
    # A package builder runs audit_package with nothing configured; DEBUG off must not stop it.
    result = subprocess.run(
        [sys.executable, "manage.py", "audit_package", str(tmp_path)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr and "SECRET_KEY" not in result.stderr
    assert result.returncode == 2 and "model-package.json" in result.stdout + result.stderr  # not a package


# --- error pages ---------------------------------------------------------------------------------


@pytest.fixture
def failing_catalog(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Client:
    """A DEBUG error page (the worst case: an operator switched DEBUG on) for a view that fails."""
    settings.DEBUG = True
    settings.CELERY_BROKER_URL = CACHE_URL
    monkeypatch.setenv("CACHE_URL", CACHE_URL)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError(f"Error connecting to {CACHE_URL}")

    monkeypatch.setattr(pages, "catalog_page", fail)
    return Client(raise_request_exception=False, CACHE_URL=CACHE_URL)


@pytest.mark.django_db
def test_the_debug_error_page_shows_no_password_from_a_url(failing_catalog: Client) -> None:
    response = failing_catalog.get("/")
    body = response.content.decode()
    assert response.status_code == 500 and "cache.internal" in body  # the page is the technical one
    assert PASSWORD not in body


@pytest.mark.django_db
def test_control_django_s_own_filter_shows_it(failing_catalog: Client, settings: Any) -> None:
    settings.DEFAULT_EXCEPTION_REPORTER_FILTER = "django.views.debug.SafeExceptionReporterFilter"
    settings.DEFAULT_EXCEPTION_REPORTER = "django.views.debug.ExceptionReporter"
    body = failing_catalog.get("/").content.decode()
    assert PASSWORD in body
    assert SafeExceptionReporterFilter().cleanse_setting("CACHE_URL", CACHE_URL) == CACHE_URL


@pytest.mark.django_db
def test_the_production_error_page_is_plain(failing_catalog: Client, settings: Any) -> None:
    settings.DEBUG = False
    body = failing_catalog.get("/").content.decode()
    assert PASSWORD not in body and "cache.internal" not in body


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://:pw@h:6379/0", "redis://********@h:6379/0"),
        ("postgres://user:pw@db/x and amqp://u:p@q//", "postgres://********@db/x and amqp://********@q//"),
        ("https://huggingface.co/api/models", "https://huggingface.co/api/models"),
        ("mailto:someone@example.org", "mailto:someone@example.org"),
    ],
)
def test_userinfo_is_redacted_in_any_url(text: str, expected: str) -> None:
    assert redact_userinfo(text) == expected
